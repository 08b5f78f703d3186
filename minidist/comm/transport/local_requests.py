"""The requests of the in-process transport: a send and a receive in flight.

``transport/local.py`` makes them (``isend``, ``irecv``); ``wait()`` blocks on
the fabric until the operation can complete, then moves this rank's modelled
clocks as the module docstring of ``local.py`` says (rules 1 and 2). A ``test()``
that finds the request incomplete lets the other ranks run before it returns
(they share one thread: nobody else could complete it otherwise).

A request is also its own :class:`~minidist.comm.transport.waits.Wait`: it says
what it waits for (``what``), whether that has happened (``done()``) and who
could make it happen (``peers()``), so blocking on it builds nothing.
How a send and a receive complete is written once (:func:`finish_send`,
:func:`finish_recv`); ``LocalCommunicator.sendrecv`` completes its two halves
with them, building a request only for a half that must wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minidist.comm.transport.communicator import Request
from minidist.comm.transport.mail import Message, PostedRecv

if TYPE_CHECKING:
    from minidist.comm.transport.local import LocalCommunicator
    from minidist.comm.transport.stats import LocalStats


class PointToPoint(Request):
    """What a send and a receive share as waits: the one peer that can complete them."""

    __slots__ = ()
    comm: LocalCommunicator
    peer: int

    def peers(self) -> list[tuple[int, int]]:
        return [(self.peer, self.comm.members[self.peer])]


class SendRequest(PointToPoint):
    """An isend in flight: complete at once (eager), or once matched (rendezvous)."""

    __slots__ = ("comm", "message", "peer", "tag", "rank")

    def __init__(self, comm: LocalCommunicator, message: Message, dest: int, tag: int) -> None:
        self.comm, self.message, self.peer, self.tag = comm, message, dest, tag
        self.rank = comm.rank

    @property
    def what(self) -> str:
        return f"send to rank {self.peer} tag {self.tag}"

    def done(self) -> bool:
        return self.message.matched or not self.message.rendezvous

    def test(self) -> bool:
        if not self.done():
            self.comm.fabric.pass_turn(self.comm.state.world_rank, self)
            return False
        self._complete()
        return True

    def wait(self) -> None:
        if not self.done():
            self.comm.fabric.block_until(self.comm.state.world_rank, self)
        self._complete()

    def _complete(self) -> None:
        finish_send(self.comm.state.stats, self.message)


class RecvRequest(PointToPoint):
    """An irecv: complete once a message matched it and its data and times are in."""

    __slots__ = ("comm", "posted", "buf", "peer", "tag", "posted_at", "completed", "rank")

    def __init__(self, comm: LocalCommunicator, posted: PostedRecv, buf, source: int,
                 tag: int, posted_at: tuple[float, float]) -> None:
        self.comm, self.posted, self.buf, self.peer, self.tag = comm, posted, buf, source, tag
        self.posted_at, self.completed, self.rank = posted_at, False, comm.rank

    @property
    def what(self) -> str:
        return f"recv from rank {self.peer} tag {self.tag}"

    def done(self) -> bool:
        return self.posted.message is not None

    def test(self) -> bool:
        if not self.completed:
            if self.posted.message is None:
                self.comm.fabric.pass_turn(self.comm.state.world_rank, self)
                return False
            self._complete(self.posted.message)
        return True

    def wait(self) -> None:
        if not self.completed:
            if self.posted.message is None:
                self.comm.fabric.block_until(self.comm.state.world_rank, self)
            self._complete(self.posted.message)

    def _complete(self, message: Message) -> None:
        data, buf = message.data, self.buf
        if not self.posted.fitted:  # PostedRecv.take
            fit = "at most " if self.posted.upto else ""
            raise ValueError(f"rank {self.rank}: {self.what}: message is {data.size} x "
                             f"{data.dtype}, buffer is {fit}{buf.size} x {buf.dtype}")
        finish_recv(self.comm.state.stats, message, self.posted_at)
        self.completed = True

    @property
    def received(self) -> int:
        """The bytes the message brought (complete receives only)."""
        return self.posted.message.data.nbytes


def finish_send(stats: LocalStats, message: Message) -> None:
    """A send completes when its transfer has left the outgoing link (rule 1): m(n),
    one round after it began."""
    stats.seconds.wait_until(message.start + message.cost)
    stats.latencies.wait_until(message.start_round + 1)


def finish_recv(stats: LocalStats, message: Message, posted_at: tuple[float, float]) -> None:
    """A receive posted at ``posted_at`` (seconds, rounds) completes with ``message``
    (rule 2), and is counted."""
    stats.seconds.finish_recv(message.start, posted_at[0], message.cost)
    stats.latencies.finish_recv(message.start_round, posted_at[1], 1)
    stats.messages_recv += 1
    stats.bytes_recv += message.data.nbytes
