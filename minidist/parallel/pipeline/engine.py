"""One engine for every schedule: rank k runs its steps of one mini-batch, in order.

Rank k holds stage k. For a forward step ``F m`` it

1. takes micro-batch m's input: rank 0 its slice of the mini-batch, the
   others the activation that rank k-1 sends (tag 2m+1);
2. runs the stage on it, keeping what backward will need (the autograd
   graph; with ``rematerialise``, only the input: ``checkpoint`` recomputes
   the rest in backward);
3. sends the output to rank k+1 (tag 2m+1) — or, on the last rank, computes
   the loss of micro-batch m, weighted by its share of the mini-batch.

For a backward step ``B m`` it

1. takes the gradient of its output: rank k+1 sends it (tag 2m+2); the last
   rank starts from its loss;
2. back-propagates it through the stage: the parameters' gradients add up
   over the micro-batches, so after the last one they are the mini-batch's;
3. sends the gradient of its input to rank k-1 (tag 2m+2), except on rank 0.

Sends do not wait (``isend``): in 1F1B, rank k may send a forward to k+1
while k+1 sends a backward to k; two blocking sends of long messages would
wait for each other for ever. They are completed at the end of the mini-batch.
Receives wait. Tags name the micro-batch, so a message can only be taken by
the step it is for, whatever the order of the steps.

The first activation a rank sends is preceded by a header (tag 0: batch
size, micro-batches, dtype, feature shape), so that rank k+1 knows the shape
of what comes, and finds out, in a sentence, when its M or its y disagree
with the sender's; gradients have the shape of the activations they belong to.

Cost per mini-batch on rank k, for micro-batches of b rows and a boundary of
width d: M forwards and M backwards of the stage, and 2M messages of
b·d values to each neighbour (one activation and one gradient per micro-batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from minidist import backend
from minidist.autograd import Tensor
from minidist.autograd.checkpoint import checkpoint
from minidist.nn import Module
from minidist.parallel.pipeline.schedules import Step
from minidist.util import chunk_bounds
from minidist.util.answers import lab_answer

HEADER_LENGTH = 9  # batch size, micro-batches, dtype, feature dims, up to 5 of them
HEADER_TAG = 0     # activations of micro-batch m go with tag 2m+1, their gradients with 2m+2


@dataclass
class StageRun:
    """What one rank did in one mini-batch."""

    loss: float | None                       # the mini-batch's loss, on the last rank
    peak_in_flight: int                      # most micro-batches held between F and B
    trace: list[tuple[str, float, float]] = field(default_factory=list)  # (step, start, end)
    outputs: list = field(default_factory=list)  # the last rank's outputs, when no targets


class StageEngine:
    """Runs one rank's schedule for a mini-batch; see the module's docstring."""

    def __init__(self, stage: Module, comm, stages: int,
                 loss_fn: Callable[[Tensor, object], Tensor], rematerialise: bool = False,
                 work: Callable[[Step, int], float] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.stage, self.comm, self.loss_fn = stage, comm, loss_fn
        self.rank, self.last = comm.rank, stages - 1
        self.rematerialise, self.work, self.clock = rematerialise, work, clock

    def run(self, steps: Sequence[Step], micro_batches: int, inputs: Sequence | None,
            targets: Sequence | None, origin: float = 0.0) -> StageRun:
        """Run ``steps``; ``inputs`` (rank 0) and ``targets`` (last rank) are per micro-batch.

        Without targets, forward steps only: the last rank keeps its outputs (evaluation).
        """
        self.micro_batches, self.inputs, self.targets = micro_batches, inputs, targets
        self.batch_size = sum(len(x) for x in inputs) if inputs is not None else None
        self.held: dict[int, tuple[Tensor, Tensor]] = {}
        self.sends: list = []
        self.header_sent, self.in_shape = False, None
        training = self.rank == self.last and targets is not None
        run = StageRun(loss=0.0 if training else None, peak_in_flight=0)
        self.origin = origin
        for step in steps:
            if step.phase == "F":
                loss = self._forward(step.micro, run)
                if loss is not None:
                    run.loss += loss
            else:
                self._backward(step.micro)
            run.trace.append((str(step), self.started, self.clock() - origin))
            run.peak_in_flight = max(run.peak_in_flight, len(self.held))
        for request, _ in self.sends:
            request.wait()
        return run

    @lab_answer("lab07_exchange")
    def _forward(self, micro: int, run: StageRun) -> float | None:
        """F: input in, stage, output out (or the weighted loss on the last rank)."""
        if self.rank == 0:
            x = Tensor(self.inputs[micro])
        else:
            x = Tensor(self._receive_activation(micro), requires_grad=True)
        self._begin()
        if self.rematerialise:
            out = checkpoint(self.stage, x)
        else:
            out = self.stage(x)
        loss = None
        if self.rank == self.last and self.targets is None:
            run.outputs.append(out.data)
            return None
        if self.rank == self.last:
            share = self._rows(micro) / self.batch_size
            out = self.loss_fn(out, self.targets[micro]) * share
            loss = float(out.item())
        self._declare_work(Step(self.rank, micro, "F"))
        if self.rank != self.last:
            self._send(out.data, self.rank + 1, 2 * micro + 1, header=True)
        self.held[micro] = (x, out)
        return loss

    @lab_answer("lab07_exchange")
    def _backward(self, micro: int) -> None:
        """B: the output's gradient in, back-propagation, the input's gradient out."""
        x, out = self.held.pop(micro)
        if self.rank != self.last:
            grad = backend.xp().empty(out.shape, out.data.dtype)
            # communication: receive the gradient of micro-batch `micro`'s output from rank k+1
            self.comm.recv(grad, self.rank + 1, tag=2 * micro + 2)
        self._begin()
        if self.rank == self.last:
            out.backward()
        elif out.requires_grad:  # rank 0's stage without parameters has nothing to do (its
            out.backward(grad)   # input needs no gradient); the gradient is still taken
        self._declare_work(Step(self.rank, micro, "B"))
        if self.rank > 0:
            self._send(x.grad, self.rank - 1, 2 * micro + 2)

    def _declare_work(self, step: Step) -> None:
        """On a modelled clock, the step's work takes time (before its result is sent)."""
        if self.work is not None:
            self.comm.compute(self.work(step, self._rows(step.micro)))

    def _begin(self) -> None:
        """The step's input is here: its busy time starts (the trace leaves the wait out)."""
        self.started = self.clock() - self.origin

    def _receive_activation(self, micro: int):
        if self.in_shape is None:
            header = np.empty(HEADER_LENGTH, np.int64)
            # communication: receive the header (batch size, M, dtype, feature shape) from k-1
            self.comm.recv(header, self.rank - 1, tag=HEADER_TAG)
            self.batch_size, self.dtype = int(header[0]), np.dtype(chr(header[2]))
            self.in_shape = tuple(int(d) for d in header[4:4 + header[3]])
            self._check_header(int(header[1]))
        buffer = backend.xp().empty((self._rows(micro), *self.in_shape), self.dtype)
        # communication: receive micro-batch `micro`'s activation from rank k-1
        self.comm.recv(buffer, self.rank - 1, tag=2 * micro + 1)
        return buffer

    def _check_header(self, micro_batches: int) -> None:
        """The sender's M and batch size against this rank's M and ``y``."""
        if micro_batches != self.micro_batches:
            raise ValueError(f"pipeline: rank {self.rank} was given micro_batches="
                             f"{self.micro_batches}, rank {self.rank - 1} {micro_batches}: "
                             "every rank must pass the same")
        rows = sum(len(y) for y in self.targets) if self.targets is not None else None
        if rows is not None and rows != self.batch_size:
            raise ValueError(f"pipeline: y has {rows} rows on rank {self.rank}, but x has "
                             f"{self.batch_size} on rank 0: they must be the same mini-batch")

    def _send(self, array, dest: int, tag: int, header: bool = False) -> None:
        array = backend.xp_of(array).ascontiguousarray(array)
        if header and not self.header_sent:
            features = array.shape[1:]
            if len(features) > HEADER_LENGTH - 4:
                raise ValueError(f"pipeline: activations of shape {array.shape} have more "
                                 f"than {HEADER_LENGTH - 4} feature dimensions")
            head = np.zeros(HEADER_LENGTH, np.int64)
            head[:4 + len(features)] = [self.batch_size, self.micro_batches,
                                        ord(array.dtype.char), len(features), *features]
            # communication: send the header of this mini-batch's activations to rank k+1
            self.sends.append((self.comm.isend(head, dest, tag=HEADER_TAG), head))
            self.header_sent = True
        # communication: send an activation (to rank k+1) or a gradient (to rank k-1)
        self.sends.append((self.comm.isend(array, dest, tag=tag), array))

    def _rows(self, micro: int) -> int:
        """Rows of micro-batch ``micro``: the batch cut by ``chunk_bounds``, on every rank."""
        start, stop = chunk_bounds(self.batch_size, self.micro_batches)[micro]
        return stop - start
