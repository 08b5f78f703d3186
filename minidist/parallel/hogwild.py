"""Hogwild! (Niu, Recht, Ré & Wright, 2011): P processes update shared arrays, with no locks.

Every worker process reads rows of a shared model, computes gradients on
its own data and writes the rows back, while the others do the same. Two
workers may update the same row at the same moment; then one update can be
lost or mixed with the other. No lock prevents it: with sparse updates
(a GloVe batch touches a few thousand of the V rows) collisions are rare
but on the commonest words, and stochastic gradient descent shrugs off the
noise they add. glove.c trains exactly this way with threads ("lock-free
asynchronous SGD"); ``minidist.glove.hogwild`` is its GloVe worker.

This file is the machinery, for any model. Processes rather than threads,
because Python runs one thread's bytecode at a time; the arrays live once,
in OS shared memory (``multiprocessing.shared_memory``: a named block under
/dev/shm that every process maps into its own address space), and each
worker sees them as numpy arrays. ``run_hogwild`` copies the arrays in,
starts P workers running ``target(shared, rank, P, sync, *args)`` and
collects their reports; each worker's epochs go:

1. ``sync.begin(epoch)``: the workers meet at a barrier, the epoch starts;
2. the worker trains on its part, writing straight into the shared arrays;
3. ``sync.report(epoch, value)``: (epoch, value, start and end times) to the
   parent, which adds up the P values of an epoch once all have reported.

Cleanup: whatever happens (a worker's exception or death, a timeout,
Ctrl-C), the parent ends its workers (terminate, then kill) and unlinks
every shared block in a ``finally``; it checks every fraction of a second
that its workers are alive, so a crash is reported at once, with the
worker's traceback. Workers start with "spawn" (a fresh interpreter that
imports ``target`` by its module's name): a script that calls
``run_hogwild`` must guard its main code with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from minidist.util.processes import stop_process_tree, terminated_like_interrupted


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


class EpochSync:
    """A worker's link to the others and to the parent: start epochs together, report them."""

    def __init__(self, barrier: Any, reports: Any) -> None:
        self.barrier, self.reports, self.started = barrier, reports, 0.0

    def begin(self, epoch: int) -> None:
        """Wait until every worker is ready for ``epoch``."""
        self.barrier.wait()
        self.started = time.monotonic()

    def report(self, epoch: int, value: float) -> None:
        """Tell the parent this worker finished ``epoch``, with its share ``value``."""
        self.reports.put(("epoch", epoch, value, self.started, time.monotonic()))


@dataclass
class HogwildRun:
    """Per epoch: the workers' reported values added up (for GloVe, the cost per record)
    and the seconds from the first worker's start to the last one's end."""

    costs: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    startup_seconds: float = 0.0


def _worker(target: Callable[..., None], rank: int, workers: int, spec: dict, barrier: Any,
            reports: Any, args: tuple) -> None:
    """A worker process: attach the shared arrays, run ``target``, report a failure."""
    shared = SharedArrays.attach(spec)
    try:
        target(shared, rank, workers, EpochSync(barrier, reports), *args)
    except threading.BrokenBarrierError:
        pass  # another worker failed: the parent reports it
    except BaseException:
        reports.put(("error", rank, traceback.format_exc()))
        barrier.abort()
    finally:
        shared.close()


def run_hogwild(target: Callable[..., None], arrays: dict[str, np.ndarray], workers: int,
                epochs: int, written: Sequence[str], args: tuple = (), timeout: float = 300.0,
                on_epoch: Callable[[int, float], None] | None = None) -> HogwildRun:
    """Run ``target`` on ``workers`` processes sharing ``arrays``; copy ``written`` back.

    ``target`` (a module-level function) reports each of ``epochs`` epochs
    once per worker through its ``sync``. ``on_epoch(epoch, value)`` is
    called as each epoch completes. The whole run must end within
    ``timeout`` seconds, else it is stopped and TimeoutError raised; the
    arrays are copied back only when every worker succeeded.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    with terminated_like_interrupted():  # a SIGTERM'd caller still stops its workers
        return _run(target, arrays, workers, epochs, written, args, timeout, on_epoch)


def _run(target: Callable[..., None], arrays: dict[str, np.ndarray], workers: int,
         epochs: int, written: Sequence[str], args: tuple, timeout: float,
         on_epoch: Callable[[int, float], None] | None) -> HogwildRun:
    context = mp.get_context("spawn")
    started = time.monotonic()
    shared = SharedArrays.create(arrays)
    processes: list[Any] = []
    try:
        barrier = context.Barrier(workers, timeout=timeout)
        reports = context.Queue()
        processes = [context.Process(target=_worker, daemon=True, name=f"hogwild-{rank}",
                                     args=(target, rank, workers, shared.spec(), barrier,
                                           reports, args))
                     for rank in range(workers)]
        for process in processes:
            process.start()
        run = HogwildRun()
        arrived: dict[int, list[tuple]] = {}  # a fast worker's next epoch may report first
        for epoch in range(epochs):
            while len(arrived.get(epoch, ())) < workers:
                report = _next_report(reports, processes, started + timeout)
                arrived.setdefault(report[1], []).append(report)
            shares = arrived.pop(epoch)
            begin, end = min(r[3] for r in shares), max(r[4] for r in shares)
            if epoch == 0:
                run.startup_seconds = begin - started
            run.seconds.append(end - begin)
            run.costs.append(sum(r[2] for r in shares))
            if on_epoch is not None:
                on_epoch(epoch, run.costs[-1])
        for name in written:
            arrays[name][...] = shared[name]
        return run
    finally:
        try:
            stop_process_tree(*processes, grace=5.0)  # SIGTERM, then SIGKILL, what is still alive
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


def __getattr__(name: str) -> Any:
    """``train_hogwild``, GloVe's trainer, moved to ``minidist.glove``; old imports still work."""
    if name == "train_hogwild":
        from minidist.glove.hogwild import train_hogwild
        return train_hogwild
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
