"""The wires between in-process ranks: mailboxes, matching, and waiting that explains itself.

All ranks of an in-process run share one :class:`Fabric`. The ranks are
cooperative tasks (``scheduler.py``): one runs at a time, and it gives the
turn away only when it must wait. The fabric does three things:

1. **Matching, as MPI does it.** A message is addressed by
   ``(communicator, source, dest, tag)`` (the communicator by its
   :meth:`channel`). Messages with the same address match receives with
   that address in the order both were posted (FIFO); a message with no
   receive yet waits in a mailbox, a receive with no message yet waits in
   a list of posted receives.
2. **Collective rendezvous** (barrier, split): every member puts a value
   on a table and waits until all members have; each gets the whole table.
3. **Blocking that explains itself.** A rank that must wait says what for
   (e.g. ``recv from rank 1 tag 7``) and whose action would release it,
   then yields. Whatever could complete its wait (a message for it, a
   receive matching its rendezvous send, the last member at its table)
   puts it back on the run queue. When no rank can run and some still wait,
   the fabric decides, exactly and at once:

   - a wait that can complete now (a ``wait_any`` whose peer ended) resumes;
   - a wait on a rank that has finished or failed can never complete: its
     rank gets an error naming the wait and that peer's end;
   - otherwise every waiting rank waits on another waiting rank: a
     deadlock. Each gets an error naming its own wait and what its peer is
     blocked in.

   A rank that *tests* a request (``test()`` in a loop) instead of waiting
   gives its turn away each time and is never blocked, so a loop of tests
   that can never succeed is not decided: a program may stop testing after
   some count and go on, and only it knows when. The run's timeout ends such
   a run, and its error says what each rank was doing: blocked in what,
   testing what with nothing posted anywhere since (:meth:`doing`).

   No real time is involved, so a busy machine cannot turn a slow rank
   into a reported deadlock, and a run is the same every time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from minidist.comm.errors import CommError
from minidist.comm.transport.mail import Message, PostedRecv
from minidist.comm.transport.waits import Wait, every_wait, explain, named


@dataclass
class Fabric:
    """Shared state of one in-process run of ``size`` ranks."""

    size: int
    # FIFO queues by address, kept only while they hold something: a collective on a
    # thousand ranks may leave a million addresses with one message each
    mailboxes: dict[Hashable, list[Message]] = field(default_factory=dict)
    posted: dict[Hashable, list[PostedRecv]] = field(default_factory=dict)
    channels: dict[Hashable, int] = field(default_factory=dict)  # communicator context -> id
    tables: dict[Hashable, dict[int, object]] = field(default_factory=dict)
    readers: dict[Hashable, int] = field(default_factory=dict)
    waiting: dict[int, Wait] = field(default_factory=dict)  # world rank -> its wait
    ended: dict[int, str] = field(default_factory=dict)  # world rank -> "finished"/"failed: .."
    verdicts: dict[int, str] = field(default_factory=dict)  # errors to raise on resuming
    turns: deque[int] = field(default_factory=deque)  # ranks that may go on, in order
    queued: set[int] = field(default_factory=set)  # the ranks in ``turns``
    posts: int = 0  # messages and receives posted, and collective entries, so far
    # world rank -> ``posts`` when it last tested a request incomplete, and that request
    # (what a run that times out says of it)
    idle_tests: dict[int, tuple[int, Wait]] = field(default_factory=dict)
    aborted: str | None = None
    yield_turn: Callable[[], None] | None = None  # set by the scheduler running the ranks

    # --- 1. matching -------------------------------------------------------------
    def channel(self, context: Hashable) -> int:
        """A small number for a communicator's context: the first part of the addresses
        its messages carry (a number is hashed faster than the nested tuple)."""
        return self.channels.setdefault(context, len(self.channels))

    def deliver(self, address: Hashable, message: Message, receiver: int) -> None:
        """Hand ``message`` to the oldest receive posted for ``address``, else queue it;
        ``receiver`` (a world rank) is woken if it waits."""
        self.posts += 1
        receivers = self.posted.get(address)
        if receivers:
            _first_out(self.posted, address, receivers).take(message)
            self.wake(receiver)
        else:
            message.data = message.data.copy()
            _append(self.mailboxes, address, message)

    def post_recv(self, address: Hashable, buf: np.ndarray, upto: bool = False,
                  posted_at: tuple[float, float] = (0.0, 0.0)) -> PostedRecv:
        """Take the oldest queued message for ``address`` into ``buf``, else register the
        receive (``upto``: a shorter message may fill it), posted at the receiver's clocks
        ``posted_at``."""
        self.posts += 1
        receive = PostedRecv(buf, upto, posted_at)
        queued = self.mailboxes.get(address)
        if queued:
            message = _first_out(self.mailboxes, address, queued)
            receive.take(message)
            if message.rendezvous:
                self.wake(message.sender)
        else:
            _append(self.posted, address, receive)
        return receive

    # --- 2. collective rendezvous -----------------------------------------------------
    def exchange(self, world_rank: int, round_id: Hashable, members: list[int],
                 local_rank: int, value: object, what: str) -> dict[int, object]:
        """Every member of ``members`` adds ``value``; returns all values by local rank."""
        self.posts += 1
        table = self.tables.setdefault(round_id, {})
        table[local_rank] = value
        if len(table) == len(members):
            for member in members:
                self.wake(member)

        def missing() -> list[tuple[int, int]]:
            return [(r, w) for r, w in enumerate(members) if r not in table]

        self.block_until(world_rank, Wait(local_rank, what,
                                          lambda: len(table) == len(members), missing))
        self.readers[round_id] = self.readers.get(round_id, 0) + 1
        if self.readers[round_id] == len(members):  # the last reader cleans up
            del self.tables[round_id], self.readers[round_id]
        return dict(table)

    # --- 3. blocking that explains itself -----------------------------------------
    def block_until(self, world_rank: int, wait: Wait) -> None:
        """Return when ``wait.done()``; raise :class:`CommError` once it never can be.
        (``wait`` may be anything with Wait's four members: a request is its own.)"""
        if wait.done():
            return
        self.waiting[world_rank] = wait
        try:
            while True:
                if self.aborted:
                    raise CommError(f"{named(world_rank, wait)}: {wait.what} abandoned: "
                                    f"{self.aborted}")
                if world_rank in self.verdicts:
                    raise CommError(self.verdicts.pop(world_rank))
                if wait.done():
                    return
                if self.yield_turn is not None:
                    self.yield_turn()  # back when woken, or when nobody can run
                else:  # a rank of its own (a world of one): nobody else can release it
                    self.settle()
        finally:
            del self.waiting[world_rank]

    def wake(self, world_rank: int) -> None:
        """Something a waiting rank waits for may have happened: give it a turn to look."""
        if world_rank in self.waiting:
            self.queue_turn(world_rank)

    def queue_turn(self, world_rank: int) -> None:
        if world_rank not in self.queued:
            self.queued.add(world_rank)
            self.turns.append(world_rank)

    def take_turn(self) -> int:
        """The first queued rank, off the queue."""
        world_rank = self.turns.popleft()
        self.queued.discard(world_rank)
        return world_rank

    def pass_turn(self, world_rank: int, wait: Wait | None = None) -> None:
        """Let the other ranks run before this one goes on (a request that tested
        incomplete, ``wait``: it cannot complete unless someone else runs). Raises
        :class:`CommError` once the run is abandoned, or when every rank that could
        complete ``wait`` has ended: a loop of tests would otherwise spin for ever."""
        if self.aborted:
            what = f"{named(world_rank, wait)}: {wait.what} " if wait is not None else \
                f"world rank {world_rank}: "
            raise CommError(f"{what}abandoned: {self.aborted}")
        if wait is not None and all(peer in self.ended for _, peer in wait.peers()):
            raise CommError(f"{named(world_rank, wait)}: {wait.what} never matched "
                            f"({self._explain(wait)})")
        if self.yield_turn is not None:
            if wait is not None:
                self.idle_tests[world_rank] = self.posts, wait
            self.queue_turn(world_rank)
            self.yield_turn()

    def end(self, world_rank: int, how: str) -> None:
        """Record that a rank's function returned or raised."""
        self.posts += 1
        self.ended[world_rank] = how

    def abort(self, reason: str) -> None:
        """Make every blocked and every later communication raise ``reason``."""
        self.aborted = reason

    def settle(self) -> list[int]:
        """No rank can run: decide every wait (module docstring, 3) and return the
        waiting ranks to resume, in rank order."""
        blocked = sorted(self.waiting)
        if self.aborted:
            return blocked
        can_go = [w for w in blocked if self.waiting[w].done()]
        if can_go:
            return can_go
        for w in blocked:
            wait = self.waiting[w]
            if any(peer in self.ended for _, peer in wait.peers()):
                self.verdicts[w] = f"{named(w, wait)}: {wait.what} never matched " \
                                   f"({self._explain(wait)})"
        if not self.verdicts:  # every waiting rank waits on another: a deadlock
            everyone = every_wait(self.waiting)
            for w in blocked:
                wait = self.waiting[w]
                self.verdicts[w] = (f"{named(w, wait)}: {wait.what} never matched "
                                    f"(deadlock: {self._explain(wait)}); {everyone}")
        return [w for w in blocked if w in self.verdicts]

    def doing(self, world_rank: int) -> str:
        """What a rank of a run that did not finish was doing, in words."""
        if world_rank in self.ended:
            return f"world rank {world_rank} {self.ended[world_rank]}"
        if world_rank in self.waiting:
            wait = self.waiting[world_rank]
            return f"{named(world_rank, wait)} blocked in {wait.what}"
        if world_rank in self._testing():
            wait = self.idle_tests[world_rank][1]
            return (f"{named(world_rank, wait)} last tested {wait.what}, nothing posted "
                    "anywhere since")
        return f"world rank {world_rank} running"

    def _testing(self) -> dict[int, Wait]:
        """The ranks testing a request since the last post anywhere: what they test."""
        return {r: wait for r, (posts, wait) in self.idle_tests.items() if posts == self.posts}

    def _explain(self, wait: Wait) -> str:
        return explain(wait, self.ended, self.waiting, self._testing())

def _append(queues: dict[Hashable, list], address: Hashable, item: object) -> None:
    queue = queues.get(address)
    if queue is None:
        queues[address] = [item]
    else:
        queue.append(item)


def _first_out(queues: dict[Hashable, list], address: Hashable, queue: list) -> object:
    """The oldest item of ``queue`` (that of ``address``), off it; an emptied queue goes."""
    if len(queue) == 1:
        del queues[address]
        return queue[0]
    return queue.pop(0)  # a list: queues are short, and one item long is the usual case
