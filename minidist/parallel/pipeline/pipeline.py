"""Pipeline parallelism (Lecture 7): a model cut into K stages on K ranks, fed micro-batches.

    pipe = Pipeline(MLP([64, 256, 256, 10]), c, micro_batches=8, schedule="1f1b")
    opt = SGD(pipe.parameters(), lr=0.1)        # rank k: stage k's parameters only
    opt.zero_grad()
    loss = pipe.train_step(x, y)               # the loss on the last rank, None elsewhere
    opt.step()                                 # every rank updates its own stage

1. construction: the model is cut into ``c.size`` stages (``split_stages``:
   consecutive layers, balanced by parameters) and rank k keeps stage k; the
   schedule (``schedules.py``) is checked, on every rank alike, before
   anything is sent: a schedule that would deadlock fails here, naming the
   ranks, instead of hanging;
2. ``train_step(x, y)``: the mini-batch is cut into M micro-batches
   (``chunk_bounds(len(x), M)``: the first ``len(x) % M`` are one row longer)
   and the engine (``engine.py``) runs rank k's steps. The last stage
   weights micro-batch m's mean loss by its share of the batch, b_m / B, so
   the loss, and the gradients summed over the micro-batches, are exactly
   the whole mini-batch's: one process training on the batch computes the same;
3. the optimiser's step: each rank updates only the parameters it holds
   (one synchronous step per mini-batch: the pipeline "flushes").

Rank 0 reads ``x``, the last rank reads ``y``; the other ranks need neither
(pass None). ``rematerialise=True`` keeps only each micro-batch's input to
the stage and recomputes the stage's forward in backward (GPipe's
re-materialisation: memory for one more forward).

Cost per mini-batch on each rank: M forwards and backwards of its stage;
2M messages to each neighbour, of b·d values for micro-batches of b rows and
a boundary of width d. The bubble — the fraction of the step a stage idles —
is (K-1)/(M+K-1) for GPipe and 1F1B (``schedules.bubble_formula``), (K-1)/K
for naive.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from minidist import backend
from minidist.autograd import Tensor, no_grad
from minidist.nn import Module, Sequential
from minidist.nn import functional as F
from minidist.parallel.pipeline.engine import StageEngine, StageRun
from minidist.parallel.pipeline.schedules import (
    Schedule,
    Step,
    check_schedule,
    make_schedule,
)
from minidist.parallel.pipeline.stages import split_stages
from minidist.util import chunk_bounds


class Pipeline(Module):
    """Stage ``c.rank`` of ``model`` cut into ``c.size`` stages; see the module's docstring.

    ``schedule``: "gpipe", "1f1b", "naive", or a Schedule (a list of each rank's
    Steps, for ``micro_batches``). ``work(step, rows)``: seconds of work to
    declare to the communicator after each step (the in-process transport's
    modelled clock advances by them; real transports ignore them).
    ``clock``: the clock of the steps' trace (``last_run.trace``).
    """

    def __init__(self, model: Sequential, c, micro_batches: int,
                 schedule: str | Schedule = "1f1b", rematerialise: bool = False,
                 loss_fn: Callable[[Tensor, object], Tensor] = F.cross_entropy,
                 balance: list[int] | None = None,
                 work: Callable[[Step, int], float] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.stages, self.micro_batches = c.size, micro_batches
        self.schedule = (make_schedule(schedule, c.size, micro_batches)
                         if isinstance(schedule, str) else schedule)
        if len(self.schedule) != c.size:
            raise ValueError(f"the schedule has {len(self.schedule)} ranks' steps, "
                             f"but the communicator has {c.size} ranks")
        check_schedule(self.schedule, micro_batches)              # 1. before any message
        stage = split_stages(model, c.size, balance)[c.rank]
        for name, layer in stage._modules.items():
            setattr(self, name, layer)       # parameters under the model's names ("2.weight")
        object.__setattr__(self, "stage", stage)  # the same layers, in order; not registered twice
        self.comm, self.clock = c.kept("pipeline", c.dup), clock
        self.engine = StageEngine(self.stage, self.comm, c.size, loss_fn, rematerialise,
                                  work, clock)
        self.last_run: StageRun | None = None

    @property
    def is_last(self) -> bool:
        return self.comm.rank == self.stages - 1

    def train_step(self, x, y) -> float | None:
        """Forward and backward of one mini-batch; the loss on the last rank, else None.

        Accumulates into the stage's parameters' ``.grad`` (zero them first).
        """
        self._check_batch(x, y)
        start = self._start()
        run = self.engine.run(self.schedule[self.comm.rank], self.micro_batches,  # 2.
                              self._micro(x) if self.comm.rank == 0 else None,
                              self._micro(y) if self.is_last else None, start)
        self.last_run = run
        return run.loss

    def predict(self, x):
        """The model's output for ``x`` (forwards only, no graph kept), on the last rank."""
        steps = [Step(self.comm.rank, m, "F") for m in range(self.micro_batches)]
        if self.comm.rank == 0 and len(x) < self.micro_batches:
            raise ValueError(f"predict: {len(x)} rows for {self.micro_batches} micro-batches")
        with no_grad():
            run = self.engine.run(steps, self.micro_batches,
                                  self._micro(x) if self.comm.rank == 0 else None, None)
        if not self.is_last:
            return None
        return backend.xp_of(run.outputs[0]).concatenate(run.outputs)

    def _start(self) -> float:
        """The origin of this mini-batch's trace: after a barrier, so ranks share it."""
        self.comm.barrier()
        return self.clock()

    def _micro(self, batch) -> list:
        data = batch.data if isinstance(batch, Tensor) else batch
        return [data[lo:hi] for lo, hi in chunk_bounds(len(data), self.micro_batches)]

    def _check_batch(self, x, y) -> None:
        for name, batch, needed in (("x", x, self.comm.rank == 0), ("y", y, self.is_last)):
            if needed and batch is None:
                raise ValueError(f"rank {self.comm.rank} needs {name} (rank 0 reads x, the "
                                 "last rank reads y)")
            if needed and len(batch) < self.micro_batches:
                raise ValueError(f"a mini-batch of {len(batch)} rows cannot be cut into "
                                 f"{self.micro_batches} micro-batches")
        if x is not None and y is not None and len(x) != len(y):
            raise ValueError(f"x has {len(x)} rows but y has {len(y)}")
