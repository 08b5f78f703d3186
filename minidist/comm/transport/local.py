"""The in-process transport: ranks are cooperative tasks, time is modelled, bytes counted.

A :class:`LocalCommunicator` has the methods of the MPI one, so collective
code runs unchanged on both. Messages are numpy copies handed over through
a shared :class:`~minidist.comm.transport.fabric.Fabric`; matching follows MPI
(same source, destination and tag: first posted, first matched). Sends are
buffered: ``send`` returns without waiting for the receiver (MPI's eager
protocol). With ``eager_limit=k`` a send of more than ``k`` bytes waits
until a receive matched it (MPI's rendezvous), so "everyone sends, then
everyone receives" deadlocks here as it would under MPI, and says so.
Stricter than MPI: the receive buffer must have the message's dtype and
element count. Device arrays travel through host copies (``device.py``).

**Counters** (``c.stats``, one per rank, shared with communicators split
from it; ``c.stats.reset()`` zeroes them): messages and bytes sent and
received, ``rounds`` and ``clock``.

**Clock**: each rank has a virtual clock ``t`` (seconds), an outgoing and
an incoming link. With ``m(n) = alpha + beta · n`` for an n-byte message:

1. *send* posted at ``t``: the transfer starts at ``s = max(t, out_free)``
   and holds the outgoing link until ``out_free = s + m(n)``. ``send``
   returns with ``t = s + m(n)``; ``isend`` returns at once and its
   ``wait()`` sets ``t = max(t, s + m(n))``. A rendezvous send (above
   ``eager_limit``) cannot begin before its receive is posted, at
   ``t_post`` on the receiver's clock: it takes the link once they match,
   ``s = max(t, t_post, out_free)`` (its ``send``, or ``wait()``, returns
   only then), so transfers matched in turn follow one another.
2. *receive* posted at ``t_post``, matched to a message that started at
   ``s``: it holds the incoming link from ``b = max(s, t_post, in_free)`` to
   ``in_free = b + m(n)``; on completion (``recv`` returns, ``wait()``)
   ``t = max(t, b + m(n))``. One message at a time, in the order the rank
   completes its receives: a fan-in of k messages costs k·m(n).
3. *sendrecv* posts both, then waits for both: the two links work at once
   (full duplex): ``t = max(t + m(n_send), max(t, s) + m(n_recv))``.
4. ``combine(op, acc, incoming)`` adds ``gamma · acc.nbytes``;
   ``compute(seconds)`` adds ``seconds`` (times a straggler's slowdown).
5. ``barrier()``: every member leaves with the largest clock (and rounds)
   found at entry; it sends nothing and costs nothing else.
   ``split()`` is free.

With a bandwidth curve (``cost/network.py``), β and γ depend on size: inside
``comm.allreduce`` on an N-byte vector every message and reduction is
priced with ``network.at(N)`` (``price_as_part_of``), elsewhere at its own
size; the cost model prices alike, so clock and model still agree exactly.

Hence: one message arrives at m(n); a chain of k messages takes k·m(n);
a ring step with sendrecv takes m(n); a root receiving P-1 messages
(P-1)·m(n); a binomial broadcast ceil(log2 P)·m(n).

**Rounds** is the same clock on a network where every message costs 1
and nothing else costs anything (m(n) = 1, no γ, no compute, no
straggling): the number of message latencies on the critical path ending
at this rank, the coefficient of α in the algorithm's cost. A ring
allreduce gives 2(P-1) on every rank; a binomial broadcast ceil(log2 P)
on the last rank reached; a root that receives from P-1 ranks, P-1 (its
link takes one message at a time). A collective's rounds is the maximum
over its ranks.

A **straggler** (:class:`Straggler`) adds ``delay`` to its clock before
each message it sends and multiplies its ``compute`` time by
``slowdown``; with ``sleep=True`` it also really sleeps for that extra.
A **failing rank** raises :class:`~minidist.comm.errors.RankFailure` on the
communication call after its first ``fail_after``; its peers get an error.
Both are part of each rank's :class:`RankState` (``local_state.py``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from minidist.comm.errors import CommError, RankFailure
from minidist.comm.ops import reduce_into
from minidist.comm.transport import device
from minidist.comm.transport.communicator import (
    Communicator,
    Request,
    check_point_to_point,
)
from minidist.comm.transport.fabric import Fabric
from minidist.comm.transport.local_requests import (
    RecvRequest,
    SendRequest,
    finish_recv,
    finish_send,
)
from minidist.comm.transport.local_state import (  # noqa: F401 (the package's import)
    RankState,
    Straggler,
)
from minidist.comm.transport.mail import Message, PostedRecv
from minidist.comm.transport.stats import LocalStats
from minidist.comm.transport.trace import trace_message
from minidist.comm.transport.waits import Wait, label
from minidist.util.values import finite


class LocalCommunicator(Communicator):
    """Rank ``rank`` of a group of in-process ranks; ``members`` are their world ranks."""

    def __init__(self, fabric: Fabric, state: RankState, members: list[int],
                 context: tuple = ("world",)) -> None:
        self.fabric, self.state, self.members, self.context = fabric, state, members, context
        self.channel = fabric.channel(context)
        self.rank = members.index(state.world_rank)
        self.size = len(members)

    @property
    def stats(self) -> LocalStats:
        """This rank's counters and clock (see the module docstring)."""
        return self.state.stats

    # --- point to point ------------------------------------------------------------
    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        if not isinstance(buf, np.ndarray):  # a device array: through a host copy
            return device.isend(self, buf, dest, tag)
        return SendRequest(self, self._post_send(buf, dest, tag), dest, tag)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        if not isinstance(buf, np.ndarray):  # a device array: through a host buffer
            return device.irecv(self, buf, source, tag)
        posted, posted_at = self._post_recv(buf, source, tag)
        return RecvRequest(self, posted, buf, source, tag, posted_at)

    def irecv_upto(self, buf: np.ndarray, source: int, tag: int = 0) -> RecvRequest:
        posted, posted_at = self._post_recv(buf, source, tag, upto=True)
        return RecvRequest(self, posted, buf, source, tag, posted_at)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 sendtag: int = 0, recvtag: int = 0) -> np.ndarray:
        """As :meth:`Communicator.sendrecv` (the receive posted, then the send, then both
        waited for), building a request only for a half that must wait: a ring's step
        on a thousand ranks is mostly this call."""
        if not (isinstance(sendbuf, np.ndarray) and isinstance(recvbuf, np.ndarray)):
            return super().sendrecv(sendbuf, dest, recvbuf, source, sendtag, recvtag)
        posted, posted_at = self._post_recv(recvbuf, source, recvtag)
        message = self._post_send(sendbuf, dest, sendtag)
        stats = self.state.stats
        if posted.message is None or posted.message.data is not recvbuf:
            RecvRequest(self, posted, recvbuf, source, recvtag, posted_at).wait()
        else:
            finish_recv(stats, posted.message, posted_at)
        if message.rendezvous and not message.matched:
            SendRequest(self, message, dest, sendtag).wait()
        else:
            finish_send(stats, message)
        return recvbuf

    def _post_send(self, buf: np.ndarray, dest: int, tag: int) -> Message:
        """Checked, then rule 1's start, the counters, and the message handed to the fabric."""
        self._enter("send", dest, tag, buf)
        state, stats, net = self.state, self.state.stats, self.state.prices
        if state.straggler.delay:
            self._straggle(state.straggler.delay)
        cost = net.message_time(buf.nbytes)
        stats.messages_sent += 1
        stats.bytes_sent += buf.nbytes
        if state.trace:
            trace_message(state.world_rank, self.members[dest], tag, buf.nbytes)
        if state.eager_limit is not None and buf.nbytes > state.eager_limit:
            # rendezvous: the link is taken when a receive matches (mail.py, PostedRecv.take)
            message = Message(buf, stats.seconds.now, cost, stats.latencies.now,
                              state.world_rank, True, links=(stats.seconds, stats.latencies))
        else:
            start, _ = stats.seconds.start_send(cost)
            start_round, _ = stats.latencies.start_send(1)
            message = Message(buf, start, cost, start_round, state.world_rank)
        # communication: copied into dest's posted receive, or to wait in its mailbox
        self.fabric.deliver((self.channel, self.rank, dest, tag), message, self.members[dest])
        return message

    def _post_recv(self, buf: np.ndarray, source: int, tag: int,
                   upto: bool = False) -> tuple[PostedRecv, tuple[float, float]]:
        """Checked, then handed to the fabric (matched at once if its message is waiting);
        with the clocks, (seconds, rounds), at which it was posted."""
        self._enter("recv", source, tag, buf)
        if not buf.flags.writeable:
            raise ValueError(f"rank {self.rank}: recv needs a writeable buffer")
        stats = self.state.stats
        posted_at = (stats.seconds.now, stats.latencies.now)
        # communication: the oldest message from `source` with `tag`, now or when it comes
        posted = self.fabric.post_recv((self.channel, source, self.rank, tag), buf, upto,
                                       posted_at)
        return posted, posted_at

    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        self.isend(buf, dest, tag).wait()

    def recv(self, buf: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        self.irecv(buf, source, tag).wait()
        return buf

    def wait_any(self, requests: Sequence[Request]) -> int:
        if not requests:
            raise ValueError(f"rank {self.rank}: wait_any needs at least one request")
        ended = self.fabric.ended

        def first_ready() -> int | None:  # a request that completes, or whose peer ended
            return next((i for i, r in enumerate(requests)
                         if r.done() or any(world in ended for _, world in r.peers())), None)

        def peers() -> list[tuple[int, int]]:
            return [peer for r in requests for peer in r.peers()]

        what = "wait_any of " + ", ".join(r.what for r in requests)
        self.fabric.block_until(self.state.world_rank,
                                Wait(self.rank, what, lambda: first_ready() is not None, peers))
        index = first_ready()
        if requests[index].done():
            requests[index].wait()  # completes it (a hopeless one raises at the caller's wait)
        return index

    def peek(self, request: Request) -> np.ndarray:
        """Block until the message of the receive ``request`` has arrived and return its
        data (read-only), without completing the receive: this rank's modelled clock
        does not move. A server that simulates a network reads every pending request
        this way, then completes (``wait``) the one a real network would have
        delivered first."""
        if not isinstance(request, RecvRequest):
            raise TypeError(f"rank {self.rank}: peek() takes a receive request, "
                            f"got {type(request).__name__}")
        self.fabric.block_until(self.state.world_rank, request)
        data = request.posted.message.data.view()
        data.flags.writeable = False
        return data

    # --- collective ----------------------------------------------------------------
    def barrier(self) -> None:
        self._enter("barrier")
        stats = self.stats
        entries = self._exchange("barrier", (stats.seconds.now, stats.latencies.now))
        stats.seconds.wait_until(max(seconds for seconds, _ in entries.values()))
        stats.latencies.wait_until(max(rounds for _, rounds in entries.values()))

    def split(self, color: int, key: int = 0) -> LocalCommunicator:
        self._enter("split")
        choices = self._exchange("split", (color, key))
        mine = sorted((k, r) for r, (c, k) in choices.items() if c == color)
        members = [self.members[r] for _, r in mine]
        seq = self.state.collective_calls[(self.context, "split")]
        return LocalCommunicator(self.fabric, self.state, members,
                                 (*self.context, "split", seq, color))

    def dup(self) -> LocalCommunicator:
        # no message: every rank numbers its duplicates alike, in call order
        calls = self.state.collective_calls
        seq = calls[(self.context, "dup")] = calls.get((self.context, "dup"), -1) + 1
        return LocalCommunicator(self.fabric, self.state, self.members,
                                 (*self.context, "dup", seq))

    # --- local work ------------------------------------------------------------------
    def combine(self, op: str, acc: np.ndarray, incoming: np.ndarray,
                incoming_first: bool = False) -> None:
        reduce_into(op, acc, incoming, incoming_first)
        self.stats.seconds.now += self.state.prices.reduce_time(acc.nbytes)

    def price_as_part_of(self, nbytes: int | None) -> None:
        network = self.state.network
        self.state.prices = network if nbytes is None else network.at(nbytes)

    def compute(self, seconds: float) -> None:
        """Account ``seconds`` of local computation on the virtual clock (a finite number
        >= 0: a clock never runs backwards, nor becomes NaN)."""
        if isinstance(seconds, np.ndarray) and seconds.ndim == 0:  # a reduction's result
            seconds = seconds.item()
        seconds = finite(f"rank {self.rank}: compute's seconds", seconds)
        slowdown = self.state.straggler.slowdown
        self.stats.seconds.now += seconds
        if slowdown != 1.0:
            self._straggle((slowdown - 1.0) * seconds)

    # --- helpers -------------------------------------------------------------------
    def _straggle(self, extra: float) -> None:
        self.stats.seconds.now += extra
        if self.state.straggler.sleep:
            time.sleep(extra)

    def _enter(self, kind: str, *point_to_point: object) -> None:
        """Check arguments (a send's or receive's peer, tag and buffer), and fail here if
        this rank was told to."""
        state = self.state
        if self.fabric.aborted:
            raise CommError(f"{label(self.rank, state.world_rank)}: {kind} after the run "
                            f"ended: {self.fabric.aborted}")
        state.calls += 1
        if state.fail_after is not None and state.calls > state.fail_after:
            raise RankFailure(f"{label(self.rank, state.world_rank)}: injected failure at {kind} "
                              f"(communication call {state.calls})")
        if point_to_point:
            check_point_to_point(self.rank, self.size, kind, *point_to_point)

    def _exchange(self, kind: str, value: object) -> dict[int, object]:
        calls = self.state.collective_calls
        seq = calls[(self.context, kind)] = calls.get((self.context, kind), -1) + 1
        return self.fabric.exchange(self.state.world_rank, (self.context, kind, seq),
                                    self.members, self.rank, value, kind)
