"""What travels between in-process ranks: a message in flight, and a receive waiting for it.

The fabric (``fabric.py``) matches them; a message's data is copied once,
into the receive's buffer when one is posted, else into a private copy that
waits in a mailbox until one is; its modelled history (when its transfer
began, what it costs) is what the receiving rank's clock needs (``local.py``,
rules 1 and 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minidist.comm.transport.stats import Timeline


@dataclass(slots=True)
class Message:
    """One message in flight: its data plus its modelled history.

    ``data`` is the sender's buffer until :meth:`Fabric.deliver` copies it,
    straight into a posted receive's buffer when one matches, else into a
    private copy that waits in the mailbox: a send never shares memory
    with its receiver, and the sender may reuse its buffer at once.
    """

    data: np.ndarray
    start: float  # when the transfer began, on the sender's clock (seconds); a rendezvous
    # message's: when it was posted, until a receive matches it (``PostedRecv.take``)
    cost: float  # m(n), seconds on each link (sender and receiver price alike)
    start_round: float  # the same, on its rounds clock
    sender: int  # world rank, woken when a rendezvous message is matched
    rendezvous: bool = False  # the sender waits until a receive has matched it
    matched: bool = False
    links: tuple[Timeline, Timeline] | None = None  # a rendezvous sender's outgoing links
    # (seconds, rounds), taken when a receive matches


@dataclass(slots=True)
class PostedRecv:
    """A receive waiting for its message (``message`` is set once matched)."""

    buf: np.ndarray
    upto: bool = False  # a shorter message fills the first items (``irecv_upto``)
    posted_at: tuple[float, float] = (0.0, 0.0)  # the receiver's clocks, seconds and rounds
    message: Message | None = None
    fitted: bool = False  # the message's data landed in ``buf``

    def take(self, message: Message) -> None:
        """Match ``message``; its data lands in ``buf`` if it fits (else the receiver's
        completion reports the mismatch, on the receiver's rank): ``message.data`` is
        then ``buf``, or its first items for a shorter message into an ``upto`` receive."""
        data, buf = message.data, self.buf
        self.fitted = True
        if data.shape == buf.shape and data.dtype == buf.dtype:
            buf[...] = data
            message.data = buf
        elif data.dtype == buf.dtype and data.size == buf.size:
            buf.reshape(-1)[...] = data.reshape(-1)
            message.data = buf
        elif self.upto and data.dtype == buf.dtype and data.size <= buf.size:
            message.data = buf.reshape(-1)[:data.size]
            message.data[...] = data.reshape(-1)
        else:
            message.data = data.copy()
            self.fitted = False
        if message.rendezvous:  # it takes the sender's link once both ends are posted
            seconds, rounds = message.links
            message.start = max(message.start, self.posted_at[0], seconds.send_free)
            seconds.send_free = message.start + message.cost
            message.start_round = max(message.start_round, self.posted_at[1], rounds.send_free)
            rounds.send_free = message.start_round + 1
        message.matched = True
        self.message = message
