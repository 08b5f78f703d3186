"""Hogwild! (Niu, Recht, Ré & Wright, 2011): P processes update one model, with no locks.

Every worker process reads rows of the shared model, computes gradients on
its own records and writes the rows back, while the others do the same. Two
workers may update the same row at the same moment; then one update can be
lost or mixed with the other. No lock prevents it: with sparse updates
(a GloVe batch touches a few thousand of the V rows) collisions are rare
but on the commonest words, and stochastic gradient descent shrugs off the noise they add. glove.c
trains exactly this way with threads ("lock-free asynchronous SGD").

Processes rather than threads, because Python runs one thread's bytecode
at a time; the model lives once, in OS shared memory
(``multiprocessing.shared_memory``: a named block under /dev/shm that
every process maps into its own address space). The word and context
tables, their AdaGrad sums and the training records all sit there; each
worker sees them as numpy arrays and trains with the vectorised GloVe
trainer of ``minidist.models.glove``, unchanged.

One epoch, in four phases:

1. The workers meet at a barrier: the epoch starts.
2. Every worker draws the same permutation of the records (seed, epoch)
   and takes its block of it: worker k of P trains on the k-th of P
   disjoint shards, so together they make one pass, as one process would.
3. Each trains on its shard in mini-batches, writing straight into the
   shared tables.
4. Each sends (epoch, its summed cost, start and end times) to the parent,
   which prints the epoch's cost once all P have reported.

Cost per epoch: nnz / P records per worker, no messages but one per
worker; the only contention is on memory bandwidth and on rows touched by
two workers at once. With workers=1 the run is exactly ``minidist.models.glove.train``'s.

Cleanup: whatever happens (a worker's exception or death, a timeout,
Ctrl-C), the parent ends its workers (terminate, then kill) and unlinks
every shared block in a ``finally``; it checks every fraction of a second
that its workers are alive, so a crash is reported at once, with the
worker's traceback. Workers start with "spawn" (a fresh interpreter): a
script that calls ``train_hogwild`` must guard its main code with
``if __name__ == "__main__":``.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from minidist.models.glove import ETA, GloVe, Records, epoch_order, train_epoch

MODEL_FIELDS = ("word", "context", "word_gradsq", "context_gradsq")
RECORD_FIELDS = ("row", "col", "weight", "log_x")


class SharedArrays:
    """Numpy arrays backed by named shared-memory blocks, usable from other processes."""

    def __init__(self, blocks: dict[str, tuple[shared_memory.SharedMemory, tuple, str]],
                 owner: bool):
        self.blocks, self.owner = blocks, owner
        self.arrays = {name: np.ndarray(shape, dtype=dtype, buffer=block.buf)
                       for name, (block, shape, dtype) in blocks.items()}

    @classmethod
    def create(cls, arrays: dict[str, np.ndarray]) -> SharedArrays:
        """Copy ``arrays`` into new blocks; the creator unlinks them in ``close``."""
        blocks: dict[str, tuple[shared_memory.SharedMemory, tuple, str]] = {}
        try:
            for name, array in arrays.items():
                block = shared_memory.SharedMemory(create=True, size=max(array.nbytes, 1))
                blocks[name] = (block, array.shape, array.dtype.str)
                np.ndarray(array.shape, array.dtype, buffer=block.buf)[...] = array
        except BaseException:
            cls(blocks, owner=True).close()
            raise
        return cls(blocks, owner=True)

    @classmethod
    def attach(cls, spec: dict[str, tuple[str, tuple, str]]) -> SharedArrays:
        """Map blocks made by another process, from its ``spec()``."""
        return cls({name: (shared_memory.SharedMemory(name=block), shape, dtype)
                    for name, (block, shape, dtype) in spec.items()}, owner=False)

    def spec(self) -> dict[str, tuple[str, tuple, str]]:
        """What another process needs to attach: block names, shapes, dtypes."""
        return {name: (block.name, shape, dtype)
                for name, (block, shape, dtype) in self.blocks.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def close(self) -> None:
        """Drop this process's mapping; the creator also removes the blocks."""
        self.arrays.clear()  # no view may outlive the mapping it points into
        for block, _, _ in self.blocks.values():
            block.close()
            if self.owner:
                block.unlink()
        self.blocks.clear()


def _worker(rank: int, workers: int, spec: dict, epochs: int, batch_size: int, eta: float,
            seed: int, barrier: Any, reports: Any) -> None:
    """A worker process: attach the shared arrays, train its shard of every epoch."""
    shared = SharedArrays.attach(spec)
    try:
        _train_shards(shared, rank, workers, epochs, batch_size, eta, seed, barrier, reports)
    except threading.BrokenBarrierError:
        pass  # another worker failed: the parent reports it
    except BaseException:
        reports.put(("error", rank, traceback.format_exc()))
        barrier.abort()
    finally:
        shared.close()


def _train_shards(shared: SharedArrays, rank: int, workers: int, epochs: int, batch_size: int,
                  eta: float, seed: int, barrier: Any, reports: Any) -> None:
    model = GloVe(*(shared[name] for name in MODEL_FIELDS))       # views of shared memory
    records = Records(*(shared[name] for name in RECORD_FIELDS))
    for epoch in range(epochs):
        barrier.wait()                                                    # 1. start
        begin = time.monotonic()
        order = epoch_order(len(records), seed, epoch)
        shard = records.take(np.array_split(order, workers)[rank])        # 2. my block
        cost = train_epoch(model, shard, None, batch_size, eta)           # 3. lock-free
        reports.put(("epoch", epoch, cost * len(shard), begin, time.monotonic()))  # 4.


@dataclass
class HogwildRun:
    """Cost per epoch (glove.c's J / 2 per record) and seconds per epoch."""

    costs: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    startup_seconds: float = 0.0


def train_hogwild(model: GloVe, records: Records, workers: int = 2, epochs: int = 1,
                  batch_size: int = 4096, eta: float = ETA, seed: int = 0,
                  timeout: float = 300.0,
                  on_epoch: Callable[[int, float], None] | None = None) -> HogwildRun:
    """Train ``model`` in place with ``workers`` lock-free processes; returns costs and times.

    An epoch's time runs from the first worker's start to the last one's end.
    ``on_epoch(epoch, cost)`` is called after each epoch. The whole run must
    end within ``timeout`` seconds, else it is stopped and TimeoutError raised.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    context = mp.get_context("spawn")
    started = time.monotonic()
    shared = SharedArrays.create({**model.arrays(),
                                  **{name: getattr(records, name) for name in RECORD_FIELDS}})
    processes: list[Any] = []
    try:
        barrier = context.Barrier(workers, timeout=timeout)
        reports = context.Queue()
        processes = [context.Process(target=_worker, daemon=True, name=f"hogwild-{rank}",
                                     args=(rank, workers, shared.spec(), epochs, batch_size,
                                           eta, seed, barrier, reports))
                     for rank in range(workers)]
        for process in processes:
            process.start()
        run = HogwildRun()
        arrived: dict[int, list[tuple]] = {}  # a fast worker's next epoch may report first
        for epoch in range(epochs):
            while len(arrived.get(epoch, ())) < workers:
                report = _next_report(reports, processes, started + timeout)
                arrived.setdefault(report[1], []).append(report)
            shards = arrived.pop(epoch)
            begin, end = min(r[3] for r in shards), max(r[4] for r in shards)
            if epoch == 0:
                run.startup_seconds = begin - started
            run.seconds.append(end - begin)
            run.costs.append(sum(r[2] for r in shards) / max(len(records), 1))
            if on_epoch is not None:
                on_epoch(epoch, run.costs[-1])
        for name in MODEL_FIELDS:
            getattr(model, name)[...] = shared[name]
        return run
    finally:
        try:
            _stop(processes)
        finally:
            shared.close()


def _next_report(reports: Any, processes: list[Any], deadline: float) -> tuple:
    """The next worker report; raise if a worker failed, died, or time ran out."""
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError("hogwild training ran past its timeout")
        try:
            report = reports.get(timeout=0.1)
        except queue.Empty:
            failed = [p for p in processes if p.exitcode not in (None, 0)]
            if failed or all(p.exitcode == 0 for p in processes):  # 0: its reports are in
                codes = {p.name: p.exitcode for p in processes}
                raise RuntimeError(f"a hogwild worker died (exit codes {codes})") from None
            continue
        if report[0] == "error":
            raise RuntimeError(f"hogwild worker {report[1]} failed:\n{report[2]}")
        return report


def _stop(processes: list[Any]) -> None:
    """End every started worker still alive: SIGTERM, then SIGKILL."""
    started = [p for p in processes if p.pid is not None]
    for process in started:
        if process.is_alive():
            process.terminate()
    for process in started:
        process.join(5.0)
        if process.is_alive():
            process.kill()
            process.join()
