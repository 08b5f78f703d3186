"""The course's MLP trained through a parameter server: every strategy of Lecture 5 in one loop.

Each worker, at each clock t:

1. **pull** every weight (all keys) from the servers;
2. compute the gradient of the mean cross-entropy on its batch for clock t
   (drawn from the seed, the worker and t only, so a run can be replayed);
   on the in-process transport the step also costs ``compute_time(t, w)``
   modelled seconds (times a straggler's slowdown);
3. **push** the gradient; the servers apply it (their optimiser, the
   consistency rule, staleness-aware SGD, n-softsync: ``ParameterServer``'s
   options);
4. **tick**: the clock advances on every server.

Steps 3, 4 and the next clock's 1 go as one request to each server
(``Worker.push_pull``): one round trip a clock, where three requests would
take two. The last clock pushes and ticks only (worker 0 still reads, to
score). With ``checkpoint_every`` k, every k-th clock the push and the tick
are followed by a checkpoint, then the pull: a run resumed from it
(``resume=True``) ends with the weights of a run never stopped, in
deterministic mode to the bit.

Worker 0 also scores the weights it pulled every ``eval_every`` clocks (on
the test set, not counted as work): the loss and accuracy against its
modelled (in-process) or real (MPI) time, from which the time to reach a
target loss is read. At the end the servers send their shards and logs to
rank 0, which scores the final model.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minidist.backend import require_cpu
from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator
from minidist.data import Dataset, load_digits, standardize
from minidist.models.mlp import accuracy, build_mlp, classification_loss
from minidist.nn import MLP
from minidist.parallel.ps.consistency import StalenessLog
from minidist.parallel.ps.keys import KeyLayout
from minidist.parallel.ps.messages import Kind
from minidist.parallel.ps.parameter_server import ParameterServer
from minidist.parallel.ps.server import ServerReport
from minidist.util.values import whole

ComputeTime = Callable[[int, int], float]  # (clock, worker) -> modelled seconds


@dataclass
class PSRun:
    """What rank 0 learns from a run (other ranks get ``None`` for the run-level fields)."""

    accuracy: float | None = None  # of the final model on the test set
    loss: float | None = None
    curve: list[tuple[float, int, float, float]] = field(default_factory=list)
    # worker 0's (seconds, clock, test loss, test accuracy) every eval_every clocks
    staleness: StalenessLog = field(default_factory=StalenessLog)  # all servers' logs
    requests: Counter = field(default_factory=Counter)  # all servers': kind name -> count
    dropped: list[int] = field(default_factory=list)
    seconds: float = 0.0  # modelled (in-process) or real, when the last server finished
    first_clock: int = 0  # where this run began: 0, or the clock of the checkpoint resumed
    values: np.ndarray | None = None  # the final parameters, layout.flatten's order

    def time_to_loss(self, target: float) -> float | None:
        """The first time worker 0 read weights whose test loss is <= ``target``."""
        return next((t for t, _, loss, _ in self.curve if loss <= target), None)


def digits(dtype: np.dtype | type | None = None) -> tuple[Dataset, Dataset]:
    """The digits, split 80/20 (seed 0) and standardized: every run's data; with
    ``dtype``, the inputs in it (float32 otherwise)."""
    sets = standardize(*load_digits(test_fraction=0.2, seed=0))
    if dtype is None:
        return sets
    return tuple(dataclasses.replace(d, x=d.x.astype(dtype)) for d in sets)


def mlp_layout(model: MLP) -> KeyLayout:
    """One table per parameter: a weight's rows are keys, a bias is one key."""
    return KeyLayout.of_arrays({name: p.data.shape for name, p in model.named_parameters()})


def train_mlp(c: Communicator, steps: int = 200, batch_size: int = 32, hidden: int = 64,
              seed: int = 0, compute_time: ComputeTime | None = None, eval_every: int = 10,
              on_step: Callable[[int], Any] | None = None,
              data: tuple[Dataset, Dataset] | None = None, checkpoint_every: int | None = None,
              **ps_options: Any) -> PSRun:
    """Train the digits MLP for ``steps`` clocks per worker; ``ps_options`` go to
    ``ParameterServer`` (servers, optimizer, consistency, staleness, softsync, checkpoint,
    resume...).

    ``data``: the (train, test) sets, standardized (default: ``digits()``); in-process
    ranks may share one copy, read only. ``checkpoint_every`` k, with ``checkpoint=`` a
    folder: every k-th clock the workers push and tick, wait while the servers save their
    shards (``Worker.checkpoint``), then pull, instead of ``push_pull``; ``resume=True``
    goes on from the last checkpoint, and ends as a run never stopped would."""
    require_cpu("train_mlp (the parameter server)")
    if (checkpoint_every is None) != (ps_options.get("checkpoint") is None):
        raise ValueError("train_mlp: checkpoint= (a folder) and checkpoint_every= (clocks) "
                         "go together")
    if checkpoint_every is not None:
        whole("checkpoint_every", checkpoint_every, least=1)
    train_set, test_set = data if data is not None else digits()
    model = build_mlp((train_set.x.shape[1], hidden, train_set.num_classes), seed=seed,
                      dtype=np.float64)
    layout = mlp_layout(model)
    ps = ParameterServer(c, layout, **ps_options)
    started = time.perf_counter()
    if ps.is_server:
        report = ps.serve(layout.flatten({n: p.data for n, p in model.named_parameters()}))
        result = PSRun(staleness=report.staleness, requests=report.requests,
                       dropped=report.dropped)
        values = _collect(c, ps, report, result)
    else:
        result = PSRun(curve=_work(c, ps, model, layout, train_set, test_set, steps,
                                   batch_size, seed, compute_time, eval_every, on_step,
                                   checkpoint_every))
        values = None
    result.seconds, result.first_clock = _seconds(c, started), ps.start_clock
    if values is not None:  # rank 0: the final model
        result.values = values
        load_values(model, layout, values)
        result.loss = float(classification_loss(model, test_set.x, test_set.y).data)
        result.accuracy = accuracy(model, test_set.x, test_set.y)
    return result


def _work(c, ps, model, layout, train_set, test_set, steps, batch_size, seed, compute_time,
          eval_every, on_step, checkpoint_every) -> list[tuple[float, int, float, float]]:
    worker, w = ps.worker(), c.rank - ps.servers
    keys, curve, started = layout.all_keys(), [], time.perf_counter()
    values = worker.pull(keys) if worker.clock < steps or w == 0 else None
    for t in range(worker.clock, steps):
        load_values(model, layout, values)
        if w == 0 and t % eval_every == 0:
            curve.append(_score(c, started, t, model, test_set))
        rows = np.random.default_rng((seed, w, t)).integers(0, len(train_set.y), batch_size)
        model.zero_grad()
        classification_loss(model, train_set.x[rows], train_set.y[rows]).backward()
        if compute_time is not None:
            c.compute(compute_time(t, w))
        gradient = layout.flatten({n: p.grad for n, p in model.named_parameters()})
        wanted = t + 1 < steps or w == 0  # the next clock's weights
        if checkpoint_every and (t + 1) % checkpoint_every == 0:
            worker.push(keys, gradient)
            worker.tick()
            worker.checkpoint()  # between the tick and the next pull, where a resumed run is
            values = worker.pull(keys) if wanted else values
        elif wanted:  # push, tick, and the next clock's pull, in one
            values = worker.push_pull(keys, gradient)
        else:
            worker.push(keys, gradient)
            worker.tick()
        if on_step is not None:
            on_step(t)
    if w == 0:
        load_values(model, layout, values)
        curve.append(_score(c, started, worker.clock, model, test_set))  # past steps if
        # resumed from a checkpoint beyond them
    worker.stop()
    return curve


def load_values(model: MLP, layout: KeyLayout, values: np.ndarray) -> None:
    """Copy ``values`` (every key's row, ``layout.flatten``'s order) into the model."""
    for name, p in model.named_parameters():
        p.data[...] = values[layout.table_slice(name)].reshape(p.data.shape)


def _score(c, started, clock, model, test_set) -> tuple[float, int, float, float]:
    loss = float(classification_loss(model, test_set.x, test_set.y).data)
    return _seconds(c, started), clock, loss, accuracy(model, test_set.x, test_set.y)


def _seconds(c: Communicator, started: float) -> float:
    modelled = getattr(c.stats, "clock", None)
    return modelled if modelled is not None else time.perf_counter() - started


def _collect(c: Communicator, ps: ParameterServer, report: ServerReport,
             result: PSRun) -> np.ndarray | None:
    """Every server's final shard, on rank 0 (None elsewhere); rank 0's ``result`` also
    gets every server's logs."""
    if c.rank != 0:
        counts = _counts(report)
        # communication: this server's shard, then how long its logs are, then the logs
        c.send(np.ascontiguousarray(report.values), 0, Tag.PS_COLLECT)
        c.send(np.array([counts.size], np.int64), 0, Tag.PS_COLLECT)
        c.send(counts, 0, Tag.PS_COLLECT)
        return None
    parts = [report.values]
    for server in range(1, ps.servers):
        first, end = ps.ranges[server]
        part = np.empty(int(ps.layout.offsets[end] - ps.layout.offsets[first]),
                        report.values.dtype)
        length = np.empty(1, np.int64)
        # communication: server `server`'s shard and logs
        parts.append(c.recv(part, server, Tag.PS_COLLECT))
        c.recv(length, server, Tag.PS_COLLECT)
        counts = c.recv(np.empty(int(length[0]), np.int64), server, Tag.PS_COLLECT)
        _add_counts(result, counts)
    return np.concatenate(parts)


def _counts(report: ServerReport) -> np.ndarray:
    """A server's logs as int64: requests per kind, then (staleness, reads, gradients)."""
    log = report.staleness
    top = max([*log.reads, *log.gradients, -1]) + 1
    rows = [(s, log.reads[s], log.gradients[s]) for s in range(top)]
    return np.array([report.requests[kind.name] for kind in Kind]
                    + [n for row in rows for n in row], np.int64)


def _add_counts(result: PSRun, counts: np.ndarray) -> None:
    kinds = len(Kind)
    for kind, n in zip(Kind, counts[:kinds].tolist(), strict=True):
        if n:
            result.requests[kind.name] += n
    for staleness, reads, gradients in counts[kinds:].reshape(-1, 3).tolist():
        if reads:
            result.staleness.reads[staleness] += reads
        if gradients:
            result.staleness.gradients[staleness] += gradients
