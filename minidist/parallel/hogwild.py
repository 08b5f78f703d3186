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
worker sees them as numpy arrays (``SharedArrays``, ``shared_arrays.py``).
``run_hogwild`` copies the arrays in, starts P workers running
``target(shared, rank, P, sync, *args)`` and collects their reports; each
worker's epochs go:

1. ``sync.begin(epoch)``: the workers meet at a barrier, the epoch starts;
2. the worker trains on its part, writing straight into the shared arrays;
3. ``sync.report(epoch, value)``: (epoch, value, start and end times) to the
   parent, which adds up the P values of an epoch once all have reported.

Cleanup: whatever happens (a worker's exception or death, a timeout,
Ctrl-C), the parent ends its workers (terminate, then kill) and unlinks
every shared block in a ``finally``; it checks every fraction of a second
that its workers are alive, so a crash is reported at once, with the
worker's traceback, and so is a worker that returned before reporting every
epoch. A worker dies with its parent (Linux: ``PR_SET_PDEATHSIG``), so a
parent killed outright leaves none running. Workers start with "spawn" (a fresh interpreter that
imports ``target`` by its module's name): a script that calls
``run_hogwild`` must guard its main code with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minidist.parallel.shared_arrays import SharedArrays
from minidist.util.processes import (
    PR_SET_PDEATHSIG,
    prctl,
    stop_process_tree,
    terminated_like_interrupted,
)
from minidist.util.values import finite, whole


class EpochSync:
    """A worker's link to the others and to the parent: start epochs together, report them."""

    def __init__(self, barrier: Any, reports: Any, rank: int = 0) -> None:
        self.barrier, self.reports, self.rank, self.started = barrier, reports, rank, 0.0

    def begin(self, epoch: int) -> None:
        """Wait until every worker is ready for ``epoch``."""
        self.barrier.wait()
        self.started = time.monotonic()

    def report(self, epoch: int, value: float) -> None:
        """Tell the parent this worker finished ``epoch``, with its share ``value``."""
        self.reports.put(("epoch", epoch, value, self.started, time.monotonic(), self.rank))


@dataclass
class HogwildRun:
    """Per epoch: the workers' reported values added up (for GloVe, the cost per record)
    and the seconds from the first worker's start to the last one's end."""

    costs: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    startup_seconds: float = 0.0


def _worker(pickled: bytes, rank: int, workers: int, spec: dict, barrier: Any,
            reports: Any, args: tuple) -> None:
    """A worker process: attach the shared arrays, run ``target``, report a failure. It loads
    ``target`` itself, so that the parent hears why it could not (not only an exit code)."""
    _die_with_parent()
    shared = SharedArrays.attach(spec)
    try:
        target = _load_target(pickled)
        target(shared, rank, workers, EpochSync(barrier, reports, rank), *args)
    except threading.BrokenBarrierError:
        pass  # another worker failed: the parent reports it
    except BaseException:
        reports.put(("error", rank, traceback.format_exc()))
        barrier.abort()
    finally:
        shared.close()


def _load_target(pickled: bytes) -> Callable[..., None]:
    try:
        return pickle.loads(pickled)
    except (AttributeError, ImportError) as error:  # "Can't get attribute", no such module
        raise RuntimeError(f"the worker cannot import the hogwild target ({error}): define "
                           "it at the top level of a module the workers can import") from error


def _check_importable(target: Callable[..., None]) -> None:
    """Refuse, before any worker starts, a ``target`` of an interactive ``__main__`` (a
    notebook, ``python -c``): it has no file, so the spawned workers cannot import it."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    if getattr(target, "__module__", None) == "__main__" and not os.path.isfile(main):
        raise ValueError(f"hogwild target {getattr(target, '__qualname__', target)!r} is "
                         "defined in an interactive __main__ (a notebook, python -c), which "
                         "the spawned workers cannot import: define it in a module")


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when its parent dies (killed outright, it can stop no
    one), and go at once if the parent is already gone."""
    parent = os.getppid()
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() != parent:
        os._exit(1)  # (elsewhere the barrier's timeout ends it)


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
    workers, epochs = whole("workers", workers, least=1), whole("epochs", epochs)
    timeout = finite("timeout", timeout)
    if not isinstance(arrays, dict):
        raise TypeError(f"arrays must be a dict of name -> numpy array, got "
                        f"{type(arrays).__name__}")
    if isinstance(written, str) or not set(written) <= set(arrays):
        raise ValueError(f"written must name arrays of {sorted(arrays)}, got {written!r}")
    _check_importable(target)
    with terminated_like_interrupted():  # a SIGTERM'd caller still stops its workers
        return _run(target, arrays, workers, epochs, written, args, timeout, on_epoch)


def _run(target: Callable[..., None], arrays: dict[str, np.ndarray], workers: int,
         epochs: int, written: Sequence[str], args: tuple, timeout: float,
         on_epoch: Callable[[int, float], None] | None) -> HogwildRun:
    context = mp.get_context("spawn")
    started = time.monotonic()
    pickled = pickle.dumps(target)  # a lambda or a nested function fails here, in the caller
    shared = SharedArrays.create(arrays)
    processes: list[Any] = []
    try:
        barrier = context.Barrier(workers, timeout=timeout)
        reports = context.Queue()
        processes = [context.Process(target=_worker, daemon=True, name=f"hogwild-{rank}",
                                     args=(pickled, rank, workers, shared.spec(), barrier,
                                           reports, args))
                     for rank in range(workers)]
        for process in processes:
            process.start()
        run = HogwildRun()
        arrived: dict[int, list[tuple]] = {}  # a fast worker's next epoch may report first
        reported = [0] * workers  # epochs each worker has reported
        for epoch in range(epochs):
            while len(arrived.get(epoch, ())) < workers:
                report = _next_report(reports, processes, started + timeout, reported, epochs,
                                      epoch)
                arrived.setdefault(report[1], []).append(report)
                reported[report[5]] += 1
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


def _next_report(reports: Any, processes: list[Any], deadline: float, reported: list[int],
                 epochs: int, epoch: int) -> tuple:
    """The next worker report; raise if a worker failed, died, returned before reporting
    every epoch, or time ran out (naming the workers behind)."""
    while True:
        if time.monotonic() > deadline:
            behind = [rank for rank, count in enumerate(reported) if count <= epoch]
            raise TimeoutError(f"hogwild training ran past its timeout: workers {behind} "
                               f"had not reported epoch {epoch}")
        try:
            report = reports.get(timeout=0.1)
        except queue.Empty:
            failed = [p for p in processes if p.exitcode not in (None, 0)]
            if failed:
                codes = {p.name: p.exitcode for p in processes}
                raise RuntimeError(f"a hogwild worker died (exit codes {codes})") from None
            quit_early = [rank for rank, p in enumerate(processes)  # 0: its reports are in
                          if p.exitcode == 0 and reported[rank] < epochs and reports.empty()]
            if quit_early:
                raise RuntimeError(f"hogwild worker {quit_early[0]} returned after reporting "
                                   f"{reported[quit_early[0]]} of {epochs} epochs: call "
                                   "sync.report once an epoch") from None
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
