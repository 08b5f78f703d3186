"""What a rank has sent and received: the counters every transport keeps.

Counting is how a lab tells a true ring allreduce from "send the whole
array around": the ring moves 2(P-1)/P·N bytes per rank, the naive one
(P-1)·N at the root. Both transports count, per rank (per process: a
communicator made by ``split`` shares its parent's counters):

- ``messages_sent`` / ``bytes_sent``: one per message posted, its size;
- ``messages_recv`` / ``bytes_recv``: one per message received, its size.

The in-process transport also models time (see ``transport/local.py``):
:class:`LocalStats` adds ``clock`` (seconds) and ``rounds`` (message
latencies), each kept by a :class:`Timeline`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields


@dataclass
class Counters:
    """Fields that count; ``reset()`` zeroes them, ``copy()`` snapshots."""

    def reset(self) -> None:
        """Zero every counter (call it on every rank, between two measured phases)."""
        fresh = type(self)()
        for counter in fields(self):
            setattr(self, counter.name, getattr(fresh, counter.name))

    def copy(self) -> Counters:
        """A snapshot that later traffic will not change."""
        return copy.deepcopy(self)


@dataclass
class CommStats(Counters):
    """Traffic counters of one rank."""

    messages_sent: int = 0
    bytes_sent: int = 0
    messages_recv: int = 0
    bytes_recv: int = 0


@dataclass
class Timeline:
    """One rank's time on one scale: now, and when its two links are next free.

    The rules (module docstring of ``transport/local.py``) in three methods.
    """

    now: float = 0.0
    send_free: float = 0.0  # the outgoing link
    recv_free: float = 0.0  # the incoming link

    def start_send(self, cost: float) -> tuple[float, float]:
        """A send posted now: returns (start, end) of its transfer on the outgoing link."""
        start = self.now if self.now > self.send_free else self.send_free
        self.send_free = start + cost
        return start, self.send_free

    def finish_recv(self, start: float, posted_at: float, cost: float) -> None:
        """A receive posted at ``posted_at`` completes a transfer that started at ``start``."""
        begin = start if start > posted_at else posted_at  # max() of three, without a call
        if self.recv_free > begin:
            begin = self.recv_free
        self.recv_free = begin + cost
        if self.recv_free > self.now:
            self.now = self.recv_free

    def wait_until(self, when: float) -> None:
        """Nothing more to do before ``when``."""
        if when > self.now:
            self.now = when


@dataclass(repr=False)
class LocalStats(CommStats):
    """Counters of the in-process transport, with its two clocks.

    ``clock``: this rank's virtual time in seconds (α-β-γ model).
    ``rounds``: the same clock for a network where every message costs 1
    and nothing else costs anything: message latencies on this rank's
    critical path.
    """

    seconds: Timeline = field(default_factory=Timeline)
    latencies: Timeline = field(default_factory=Timeline)

    @property
    def clock(self) -> float:
        return self.seconds.now

    @property
    def rounds(self) -> int:
        return int(self.latencies.now)

    def __repr__(self) -> str:
        return (f"LocalStats(messages_sent={self.messages_sent}, bytes_sent={self.bytes_sent}, "
                f"messages_recv={self.messages_recv}, bytes_recv={self.bytes_recv}, "
                f"rounds={self.rounds}, clock={self.clock:.6g})")
