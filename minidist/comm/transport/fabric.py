"""The wires between in-process ranks: mailboxes, matching, and waiting without hanging.

All ranks of an in-process run are threads sharing one :class:`Fabric`.
It does three things, all under one lock (one condition variable):

1. **Matching, as MPI does it.** A message is addressed by
   ``(communicator, source, dest, tag)``. Messages with the same address
   match receives with that address in the order both were posted (FIFO);
   a message with no receive yet waits in a mailbox, a receive with no
   message yet waits in a list of posted receives.
2. **Collective rendezvous** (barrier, split): every member puts a value
   on a table and waits until all members have; each gets the whole table.
3. **Blocking that explains itself.** A rank that must wait says what for
   (e.g. ``recv from rank 1 tag 7``) and whose action would release it.
   While it waits the fabric checks, each time anything changes, whether
   the wait has become hopeless:

   - a rank it waits for has finished or failed, or
   - every rank still running is waiting and none of their waits can
     complete: a deadlock. Each blocked rank then raises an error naming
     its own wait and what its peer is stuck in.

   A wait that is neither done nor provably hopeless after ``recv_timeout``
   real seconds raises too (a peer may be computing forever).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from minidist.comm.errors import CommError


@dataclass
class Message:
    """One message in flight: a private copy of the data plus its modelled history."""

    data: np.ndarray
    start: float  # when the transfer began, on the sender's clock (seconds)
    start_round: float  # the same, on its rounds clock
    rendezvous: bool = False  # the sender waits until a receive has matched it
    matched: bool = False


@dataclass
class PostedRecv:
    """A receive waiting for its message (``message`` is set once matched)."""

    message: Message | None = None


@dataclass
class Wait:
    """Why a rank is blocked: a description and the world ranks that could release it."""

    rank: int  # the waiting rank, numbered in the communicator it called
    what: str  # e.g. "recv from rank 1 tag 7"
    done: Callable[[], bool]
    peers: Callable[[], list[tuple[int, int]]]  # (rank in the communicator, world rank)


@dataclass
class Fabric:
    """Shared state of one in-process run of ``size`` ranks (threads)."""

    size: int
    recv_timeout: float = 10.0
    cond: threading.Condition = field(default_factory=threading.Condition)
    mailboxes: dict[Hashable, deque[Message]] = field(default_factory=lambda: defaultdict(deque))
    posted: dict[Hashable, deque[PostedRecv]] = field(default_factory=lambda: defaultdict(deque))
    tables: dict[Hashable, dict[int, object]] = field(default_factory=dict)
    readers: dict[Hashable, int] = field(default_factory=dict)
    waiting: dict[int, Wait] = field(default_factory=dict)  # world rank -> its wait
    ended: dict[int, str] = field(default_factory=dict)  # world rank -> "finished"/"failed: .."
    verdicts: dict[int, str] = field(default_factory=dict)  # deadlock errors to raise
    aborted: str | None = None

    # --- 1. matching -------------------------------------------------------------
    def deliver(self, address: Hashable, message: Message) -> None:
        """Hand ``message`` to the oldest receive posted for ``address``, else queue it."""
        with self.cond:
            receivers = self.posted.get(address)
            if receivers:
                receivers.popleft().message = message
                message.matched = True
            else:
                self.mailboxes[address].append(message)
            self.cond.notify_all()

    def post_recv(self, address: Hashable) -> PostedRecv:
        """Take the oldest queued message for ``address``, else register the receive."""
        with self.cond:
            receive = PostedRecv()
            queued = self.mailboxes.get(address)
            if queued:
                receive.message = queued.popleft()
                receive.message.matched = True
                self.cond.notify_all()  # a rendezvous sender may be waiting for this
            else:
                self.posted[address].append(receive)
            return receive

    # --- 2. collective rendezvous -----------------------------------------------------
    def exchange(self, world_rank: int, round_id: Hashable, members: list[int],
                 local_rank: int, value: object, what: str) -> dict[int, object]:
        """Every member of ``members`` adds ``value``; returns all values by local rank."""
        with self.cond:
            table = self.tables.setdefault(round_id, {})
            table[local_rank] = value
            self.cond.notify_all()

            def missing() -> list[tuple[int, int]]:
                return [(r, w) for r, w in enumerate(members) if r not in table]

            self.block_until(world_rank, Wait(local_rank, what, lambda: not missing(), missing))
            self.readers[round_id] = self.readers.get(round_id, 0) + 1
            if self.readers[round_id] == len(members):  # the last reader cleans up
                del self.tables[round_id], self.readers[round_id]
            return dict(table)

    # --- 3. blocking that explains itself -----------------------------------------
    def block_until(self, world_rank: int, wait: Wait) -> None:
        """Return when ``wait.done()``; raise :class:`CommError` once it never can be."""
        with self.cond:
            if wait.done():
                return
            self.waiting[world_rank] = wait
            self.cond.notify_all()  # others re-check for a deadlock that includes us
            deadline = time.monotonic() + self.recv_timeout
            try:
                while not wait.done():
                    self._raise_if_hopeless(world_rank, wait)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise CommError(f"rank {wait.rank}: {wait.what} not matched within "
                                        f"{self.recv_timeout} s ({self._explain(wait)})")
                    self.cond.wait(remaining)
            finally:
                del self.waiting[world_rank]

    def end(self, world_rank: int, how: str) -> None:
        """Record that a rank's function returned or raised; wake whoever waits on it."""
        with self.cond:
            self.ended[world_rank] = how
            self.cond.notify_all()

    def abort(self, reason: str) -> None:
        """Make every blocked and every later communication raise ``reason``."""
        with self.cond:
            self.aborted = reason
            self.cond.notify_all()

    def _raise_if_hopeless(self, world_rank: int, wait: Wait) -> None:
        if self.aborted:
            raise CommError(f"rank {wait.rank}: {wait.what} abandoned: {self.aborted}")
        if world_rank in self.verdicts:
            raise CommError(self.verdicts.pop(world_rank))
        if any(world in self.ended for _, world in wait.peers()):
            raise CommError(f"rank {wait.rank}: {wait.what} never matched "
                            f"({self._explain(wait)})")
        running = [w for w in range(self.size) if w not in self.ended]
        if all(w in self.waiting and not self.waiting[w].done() for w in running):
            # Deadlock: give every blocked rank its own verdict, then raise ours.
            for w in running:
                blocked = self.waiting[w]
                self.verdicts[w] = (f"rank {blocked.rank}: {blocked.what} never matched "
                                    f"(deadlock: {self._explain(blocked)})")
            self.cond.notify_all()
            raise CommError(self.verdicts.pop(world_rank))

    def _explain(self, wait: Wait) -> str:
        """What the ranks that could release ``wait`` are doing, in words."""
        states = []
        for rank, world in wait.peers():
            if world in self.ended:
                states.append(f"rank {rank} {self.ended[world]}")
            elif world in self.waiting:
                states.append(f"rank {rank} is blocked in {self.waiting[world].what}")
            else:
                states.append(f"rank {rank} is still running")
        return "; ".join(states) or "no peer"
