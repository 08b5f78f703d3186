"""Where does a training step's time go? A per-rank recorder of intervals.

A synchronous data-parallel step is compute (forward, backward), then
communication (the gradient allreduce), and — on every rank but the slowest
— *waiting*: an allreduce cannot finish before the last rank has joined it,
so a fast rank sits idle until the straggler arrives. Step time is the
slowest rank's compute plus the communication: that is why synchronous
training (BSP) runs at the pace of its slowest member.

A :class:`TraceRecorder` writes down, on one rank, ``(kind, lane, start,
end)`` for each phase:

- ``kind``: ``"compute"``, ``"comm"`` or ``"wait"`` (see ``KINDS``);
- ``lane``: ``"main"`` (the training thread) or ``"comm"`` (the background
  thread of :class:`~minidist.parallel.ddp.DataParallel`, whose allreduces
  run *during* backward: overlap shows as two lanes busy at once).

Times are seconds on the recorder's ``clock`` since :meth:`TraceRecorder.start`,
which every rank calls after a barrier, so the ranks share one origin. The
clock is the wall clock (``time.perf_counter``) by default: real, and on a
shared machine noisy, with origins that differ by a barrier's skew. On the
in-process transport it can be the modelled clock,
``TraceRecorder(c.rank, clock=lambda: c.stats.clock)``: it advances only for
messages and for work a rank declares with ``c.compute(seconds)``, the
barrier gives every rank the same origin, and a run gives the same times on
any machine (exact enough to check, as Lab 4 does).
``minidist.viz.timeline.plot_timeline`` draws the traces of all ranks.

Recording costs two clock readings and one list append per interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

KINDS = ("compute", "comm", "wait")
LANES = ("main", "comm")


@dataclass(frozen=True)
class Interval:
    """One phase on one rank: what it was, on which thread, from when to when (s)."""

    kind: str
    lane: str
    start: float
    end: float


class TraceRecorder:
    """Intervals of one rank on ``clock`` (seconds). Thread-safe: the communication
    thread records too."""

    def __init__(self, rank: int = 0, clock: Callable[[], float] = time.perf_counter) -> None:
        self.rank, self.clock = rank, clock
        self.intervals: list[Interval] = []
        self.origin = clock()
        self._lock = threading.Lock()

    def start(self, comm=None) -> None:
        """Forget earlier intervals and set time 0 to now (after ``comm.barrier()`` if given)."""
        if comm is not None:
            comm.barrier()
        with self._lock:
            self.intervals = []
            self.origin = self.clock()

    def now(self) -> float:
        """Seconds since the origin."""
        return self.clock() - self.origin

    def add(self, kind: str, start: float, end: float, lane: str = "main") -> None:
        """Record an interval measured elsewhere (times from :meth:`now`)."""
        if kind not in KINDS or lane not in LANES:
            raise ValueError(f"kind must be one of {KINDS} and lane one of {LANES}, "
                             f"got {kind!r}, {lane!r}")
        with self._lock:
            self.intervals.append(Interval(kind, lane, start, end))

    @contextmanager
    def interval(self, kind: str, lane: str = "main") -> Iterator[None]:
        """``with recorder.interval("compute"): ...`` records the block's span."""
        start = self.now()
        try:
            yield
        finally:
            self.add(kind, start, self.now(), lane)

    def to_list(self) -> list[tuple[str, str, float, float]]:
        """Plain tuples ``(kind, lane, start, end)``: cheap to return from a rank."""
        with self._lock:
            return [(i.kind, i.lane, i.start, i.end) for i in self.intervals]
