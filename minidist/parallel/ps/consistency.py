"""Consistency models: when may a server answer a worker's read? (Lecture 5)

Each worker counts its **clock**: the iterations it has finished (it tells
every server with a CLOCK request at the end of each one). A worker at
clock c reads the parameters for its iteration c. Which updates must that
read include?

- **BSP** (bulk synchronous parallel): all of iterations 0..c-1 of every
  worker, and none of iteration c. A read at clock c waits until *every*
  worker has finished iteration c-1: a barrier every clock; and the servers
  hold each push until the barrier after its iteration, so that every read
  of a clock sees the same weights, however the messages were timed
  (synchronous SGD, exactly). The slowest worker sets the pace.
- **ASP** (asynchronous parallel): none are promised. Reads are answered
  at once with whatever has arrived; staleness is unbounded (reported as a
  histogram, never bounded).
- **SSP(s)** (stale synchronous parallel, Ho et al. 2013): those of
  iterations 0..c-s-1. A worker may run at most s clocks ahead of the
  slowest; the read waits while ``c - min(clocks) > s``. Pushes are
  applied as they come, so a read may also see newer updates. SSP(∞) is
  ASP; SSP(0) waits like BSP, and equals it when no push of a clock comes
  before a read of the same clock (as in the modelled-clock order, where
  all of a clock's reads are answered at its barrier).

A read's **staleness** is ``c - min(clocks)`` when it is answered: how many
clocks the slowest worker is behind the reader, the number of iterations
whose updates the read may miss. Under SSP(s) it is at most s, by the
rule; the servers log every read's staleness so a test (and a student)
can check.

The servers enforce the rule (they hold every worker's clock); workers
stopped or dropped (failed) no longer count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from minidist.parallel.ps.messages import Header
from minidist.util.answers import lab_answer


class Consistency:
    """A rule deciding whether a read at ``clock`` may be answered, given every live
    worker's clock."""

    name = "consistency"
    staleness: float = float("inf")  # the most clocks a read may lag (the rule's bound)
    holds_updates = False  # True: a push waits for the barrier (BSP), else applied at once

    def may_serve(self, clock: int, clocks: Sequence[int]) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class BSP(Consistency):
    """A read at clock c waits until every worker has finished iteration c-1."""

    name = "bsp"
    staleness = 0
    holds_updates = True  # a push is applied at the barrier after its iteration

    def may_serve(self, clock: int, clocks: Sequence[int]) -> bool:
        return all(other >= clock for other in clocks)


class ASP(Consistency):
    """Every read is answered at once."""

    name = "asp"

    def may_serve(self, clock: int, clocks: Sequence[int]) -> bool:
        return True


class SSP(Consistency):
    """A read at clock c waits while the slowest worker is more than s clocks behind."""

    name = "ssp"

    def __init__(self, staleness: int) -> None:
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise ValueError(f"SSP's staleness bound must be an integer >= 0, got {staleness!r}")
        self.staleness = staleness

    @lab_answer("lab06_ssp_rule")
    def may_serve(self, clock: int, clocks: Sequence[int]) -> bool:
        slowest = min(clocks, default=clock)
        return clock - slowest <= self.staleness

    def __repr__(self) -> str:
        return f"ssp({self.staleness})"


class HeldPushes:
    """BSP's pushes on a server (worker, header, keys, rows), each held until every
    running worker has finished the iteration it belongs to: the barrier after it."""

    def __init__(self) -> None:
        self.pushes: list[tuple[int, Header, np.ndarray, np.ndarray]] = []

    def hold(self, worker: int, header: Header, keys: np.ndarray, rows: np.ndarray) -> None:
        self.pushes.append((worker, header, keys.copy(), rows.copy()))

    def release(self, clocks: Iterable[int]) -> list[tuple[int, Header, np.ndarray, np.ndarray]]:
        """The pushes of every iteration all ``clocks`` have finished (all of them once no
        worker runs), no longer held, in an order that does not depend on their timing."""
        barrier = min(clocks, default=None)
        held, self.pushes = self.pushes, []
        ready = []
        for push in held:
            if barrier is None or push[1].clock < barrier:
                ready.append(push)
            else:
                self.pushes.append(push)
        # in the order the requests began, ties by worker (stable: one worker's in turn):
        # the modelled-clock order in-process, worker order under MPI, on every run
        return sorted(ready, key=lambda p: (p[1].timestamp, p[0]))


def consistency(name: str | Consistency, staleness: int | None = None) -> Consistency:
    """``"bsp"``, ``"asp"`` or ``"ssp"`` (with ``staleness``) as a rule object."""
    if isinstance(name, Consistency):
        return name
    if name == "ssp":
        if staleness is None:
            raise ValueError("consistency 'ssp' needs a staleness bound s >= 0")
        return SSP(staleness)
    if name in ("bsp", "asp"):
        if staleness not in (None, 0):  # an SSP bound given to another rule: a mistake
            raise ValueError(f"{name.upper()} has no staleness bound to set, got {staleness} "
                             "(SSP(s) is consistency 'ssp')")
        return BSP() if name == "bsp" else ASP()
    raise ValueError(f"consistency must be 'bsp', 'asp' or 'ssp', got {name!r}")


@dataclass
class StalenessLog:
    """What one server saw: each read's staleness in clocks, each gradient's τ (1 + the
    updates it missed)."""

    reads: Counter = field(default_factory=Counter)  # clocks behind the slowest -> count
    gradients: Counter = field(default_factory=Counter)  # staleness τ >= 1 -> count

    def merge(self, other: StalenessLog) -> StalenessLog:
        return StalenessLog(self.reads + other.reads, self.gradients + other.gradients)

    def table(self) -> str:
        """Both histograms as text: ``staleness  reads  gradients``."""
        top = max([*self.reads, *self.gradients, 0])
        lines = ["staleness  reads  gradients"]
        lines += [f"{s:9d}  {self.reads[s]:5d}  {self.gradients[s]:9d}" for s in range(top + 1)]
        return "\n".join(lines)
