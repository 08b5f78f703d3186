"""The requests of the in-process transport: a send and a receive in flight.

``transport/local.py`` makes them (``isend``, ``irecv``); ``wait()`` blocks on
the fabric until the operation can complete, then moves this rank's modelled
clocks as the module docstring of ``local.py`` says (rules 1 and 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from minidist.comm.transport.communicator import Request
from minidist.comm.transport.fabric import Message, PostedRecv, Wait

if TYPE_CHECKING:
    from minidist.comm.transport.local import LocalCommunicator


class SendRequest(Request):
    """An isend in flight: complete at once (eager), or once matched (rendezvous)."""

    def __init__(self, comm: LocalCommunicator, message: Message, dest: int, tag: int,
                 ends: tuple[float, float]) -> None:
        self.comm, self.message, self.ends = comm, message, ends
        self.wait_for = Wait(comm.rank, f"send to rank {dest} tag {tag}",
                             lambda: message.matched or not message.rendezvous,
                             lambda: [(dest, comm.members[dest])])

    def test(self) -> bool:
        if self.message.rendezvous and not self.message.matched:
            return False
        stats = self.comm.stats
        stats.seconds.wait_until(self.ends[0])
        stats.latencies.wait_until(self.ends[1])
        return True

    def wait(self) -> None:
        if self.message.rendezvous:
            self.comm.fabric.block_until(self.comm.state.world_rank, self.wait_for)
        self.test()


class RecvRequest(Request):
    """An irecv: complete once a message matched it and its data and times are in."""

    def __init__(self, comm: LocalCommunicator, posted: PostedRecv, buf: np.ndarray,
                 source: int, tag: int, posted_at: tuple[float, float]) -> None:
        self.comm, self.posted, self.buf, self.posted_at = comm, posted, buf, posted_at
        self.completed = False
        self.wait_for = Wait(comm.rank, f"recv from rank {source} tag {tag}",
                             lambda: posted.message is not None,
                             lambda: [(source, comm.members[source])])

    def test(self) -> bool:
        if not self.completed and self.posted.message is not None:
            self._complete(self.posted.message)
        return self.completed

    def wait(self) -> None:
        if not self.completed:
            self.comm.fabric.block_until(self.comm.state.world_rank, self.wait_for)
            self._complete(self.posted.message)

    def _complete(self, message: Message) -> None:
        data, buf = message.data, self.buf
        if data.dtype != buf.dtype or data.size != buf.size:
            raise ValueError(f"rank {self.comm.rank}: {self.wait_for.what}: message is "
                             f"{data.size} x {data.dtype}, buffer is {buf.size} x {buf.dtype}")
        buf.reshape(-1)[...] = data.reshape(-1)
        stats, net = self.comm.stats, self.comm.state.prices
        stats.seconds.finish_recv(message.start, self.posted_at[0],
                                  net.message_time(data.nbytes))
        stats.latencies.finish_recv(message.start_round, self.posted_at[1], 1)
        stats.messages_recv += 1
        stats.bytes_recv += data.nbytes
        self.completed = True
