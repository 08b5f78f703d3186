"""The MPI transport: a thin, counting wrapper over an mpi4py communicator.

Every method maps to one of mpi4py's *buffer* methods (the capitalised
ones: ``Send``, ``Recv``, ``Isend``, ``Irecv``, ``Sendrecv``, ``Barrier``,
``Split``). They hand MPI a pointer to the numpy array's memory; the
lower-case ``send``/``recv`` of mpi4py would pickle Python objects, which
costs copies and CPU on every message, so they never appear here.

Arrays must be C-contiguous (MPI reads raw memory); their dtype tells
mpi4py the MPI datatype. The wrapper counts, per process, messages and
bytes sent and received (``c.stats``, a
:class:`~minidist.comm.transport.stats.CommStats`, shared with communicators split
from it), with the same rules as the in-process transport: a receive
counts its buffer's size. There is no modelled clock: under MPI, time is
real, measure it. ``MINIDIST_TRACE=1`` prints each message sent. Device
arrays travel through host copies (``device.py``), or, where the MPI library
reports that it reads GPU memory itself (CUDA-aware MPI,
``device.mpi_reads_gpu_memory``), as they are: mpi4py hands MPI the GPU
pointer, after the GPU's queue has finished writing the array.

Under an MPI with fault tolerance (ULFM: Open MPI's ``mpiexec --with-ft ulfm``)
a receive or wait whose peer's process has failed raises
:class:`~minidist.comm.errors.PeerFailed` naming the failed ranks, and the
others go on talking (a parameter server drops such a worker). Without it,
a process that dies ends the whole job.

``c.mpi_comm`` is the raw mpi4py communicator, for what MPI does itself
(``c.mpi_comm.Allreduce``: the "mpi" allreduce algorithm). Nothing here
depends on the host: the same code runs on one laptop or across a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mpi4py import MPI

from minidist import backend
from minidist.comm.errors import PeerFailed
from minidist.comm.transport import device
from minidist.comm.transport.communicator import Communicator, Request
from minidist.comm.transport.stats import CommStats
from minidist.comm.transport.trace import trace_enabled, trace_message


class MPICommunicator(Communicator):
    """Rank ``rank`` of the mpi4py communicator ``mpi_comm``."""

    def __init__(self, mpi_comm: MPI.Comm, stats: CommStats | None = None) -> None:
        self.mpi_comm = mpi_comm
        self.rank = mpi_comm.Get_rank()
        self.size = mpi_comm.Get_size()
        self.stats = stats if stats is not None else CommStats()
        self.status = MPI.Status()  # a blocking receive's, kept: one allocation fewer a call
        self.trace = trace_enabled()
        self.world_ranks = _world_ranks(mpi_comm) if self.trace else []

    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        if not isinstance(buf, np.ndarray) and not device.direct(buf):  # via a host copy
            return device.isend(self, buf, dest, tag).wait()
        self._count_send(buf, dest, tag)
        self.mpi_comm.Send(buf, dest, tag)

    def recv(self, buf: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        if not isinstance(buf, np.ndarray) and not device.direct(buf):  # via a host buffer
            device.irecv(self, buf, source, tag).wait()
            return buf
        self._count_recv(buf)
        status = self.status
        try:
            self.mpi_comm.Recv(buf, source, tag, status)
        except MPI.Exception as err:
            raise named_failure(self.mpi_comm, err, self.rank, buf, source, tag) from None
        check_arrived(status, self.rank, buf, source, tag)
        return buf

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        if not isinstance(buf, np.ndarray) and not device.direct(buf):
            return device.isend(self, buf, dest, tag)
        self._count_send(buf, dest, tag)
        return MPIRequest(self.mpi_comm.Isend(buf, dest, tag), self.mpi_comm)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        if not isinstance(buf, np.ndarray) and not device.direct(buf):
            return device.irecv(self, buf, source, tag)
        self._count_recv(buf)
        return RecvRequest(self.mpi_comm.Irecv(buf, source, tag), self.mpi_comm,
                           (self.rank, buf, source, tag))

    def irecv_upto(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        _check_contiguous(buf, "recv")
        return UptoRequest(self.mpi_comm.Irecv(buf, source, tag), self.mpi_comm, self.stats)

    def wait_any(self, requests: Sequence[Request]) -> int:
        if not requests:
            raise ValueError("wait_any needs at least one request")
        status = MPI.Status()
        try:
            index = int(MPI.Request.Waitany([r.request for r in requests], status))
        except MPI.Exception as err:
            raise named_failure(self.mpi_comm, err) from None
        arrived = getattr(requests[index], "arrived", None)  # a receive's (or its inner one's)
        if arrived is not None:
            arrived(status)  # its status is Waitany's: the request itself is spent
        requests[index].wait()  # returns at once; a receive into a device array copies up
        return index

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 sendtag: int = 0, recvtag: int = 0) -> np.ndarray:
        # the hot path of every exchange: the checks and counters of
        # _count_send and _count_recv, written out (two calls fewer)
        if not (isinstance(sendbuf, np.ndarray) and isinstance(recvbuf, np.ndarray)):
            # a device array: posted apart, each through its host copy or straight
            return super().sendrecv(sendbuf, dest, recvbuf, source, sendtag, recvtag)
        if not (sendbuf.flags.c_contiguous and recvbuf.flags.c_contiguous):
            _check_contiguous(sendbuf, "send")
            _check_contiguous(recvbuf, "recv")
        stats = self.stats
        stats.messages_sent += 1
        stats.bytes_sent += sendbuf.nbytes
        stats.messages_recv += 1
        stats.bytes_recv += recvbuf.nbytes
        if self.trace:
            trace_message(self.world_ranks[self.rank], self.world_ranks[dest], sendtag,
                          sendbuf.nbytes)
        status = self.status
        try:
            self.mpi_comm.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        except MPI.Exception as err:
            raise named_failure(self.mpi_comm, err, self.rank, recvbuf, source, recvtag) from None
        if status.Get_count(MPI.BYTE) != recvbuf.nbytes:
            check_arrived(status, self.rank, recvbuf, source, recvtag)
        return recvbuf

    def barrier(self) -> None:
        self.mpi_comm.Barrier()

    def split(self, color: int, key: int = 0) -> MPICommunicator:
        return MPICommunicator(self.mpi_comm.Split(color, key), self.stats)

    def dup(self) -> MPICommunicator:
        return MPICommunicator(self.mpi_comm.Dup(), self.stats)

    def _count_send(self, buf: np.ndarray, dest: int, tag: int) -> None:
        _check_contiguous(buf, "send")
        self.stats.messages_sent += 1
        self.stats.bytes_sent += buf.nbytes
        if self.trace:
            trace_message(self.world_ranks[self.rank], self.world_ranks[dest], tag, buf.nbytes)

    def _count_recv(self, buf: np.ndarray) -> None:
        _check_contiguous(buf, "recv")
        self.stats.messages_recv += 1
        self.stats.bytes_recv += buf.nbytes


class MPIRequest(Request):
    """An MPI request and its communicator (which names a failed peer); the caller
    keeps the buffer."""

    def __init__(self, request: MPI.Request, mpi_comm: MPI.Comm) -> None:
        self.request, self.mpi_comm = request, mpi_comm

    def wait(self) -> None:
        try:
            self.request.Wait()
        except MPI.Exception as err:
            raise named_failure(self.mpi_comm, err) from None

    def test(self) -> bool:
        try:
            return bool(self.request.Test())
        except MPI.Exception as err:
            raise named_failure(self.mpi_comm, err) from None


class RecvRequest(MPIRequest):
    """An ``irecv``: complete once the message has come, and it filled the buffer."""

    def __init__(self, request: MPI.Request, mpi_comm: MPI.Comm,
                 receive: tuple[int, np.ndarray, int, int]) -> None:
        super().__init__(request, mpi_comm)
        self.receive = receive  # (rank, buffer, source, tag), for check_arrived
        self.done = False

    def wait(self) -> None:
        if not self.done:
            status = MPI.Status()
            try:
                self.request.Wait(status)
            except MPI.Exception as err:
                raise named_failure(self.mpi_comm, err, *self.receive) from None
            self.arrived(status)

    def test(self) -> bool:
        if not self.done:
            status = MPI.Status()
            try:
                if not self.request.Test(status):
                    return False
            except MPI.Exception as err:
                raise named_failure(self.mpi_comm, err, *self.receive) from None
            self.arrived(status)
        return True

    def arrived(self, status: MPI.Status) -> None:
        """Complete, with ``status`` (its own, or ``wait_any``'s)."""
        self.done = True
        check_arrived(status, *self.receive)


def check_arrived(status: MPI.Status, rank: int, buf: np.ndarray, source: int,
                  tag: int) -> None:
    """A received message must fill its buffer, as the in-process transport requires (MPI
    leaves the rest of a longer buffer as it was). Only the bytes can be compared here: a
    message of another dtype with as many bytes is not seen."""
    got = status.Get_count(MPI.BYTE)
    if got != buf.nbytes:
        raise ValueError(f"rank {rank}: recv from rank {source} tag {tag}: message is "
                         f"{got} bytes, buffer is {buf.nbytes} ({buf.size} x {buf.dtype})")


class UptoRequest(MPIRequest):
    """An ``irecv_upto``: counted once complete, by the bytes its status says came."""

    def __init__(self, request: MPI.Request, mpi_comm: MPI.Comm, stats: CommStats) -> None:
        super().__init__(request, mpi_comm)
        self.stats, self.received = stats, None

    def wait(self) -> None:
        if self.received is None:
            status = MPI.Status()
            try:
                self.request.Wait(status)
            except MPI.Exception as err:
                raise named_failure(self.mpi_comm, err) from None
            self.arrived(status)

    def test(self) -> bool:
        if self.received is None:
            status = MPI.Status()
            try:
                if not self.request.Test(status):
                    return False
            except MPI.Exception as err:
                raise named_failure(self.mpi_comm, err) from None
            self.arrived(status)
        return True

    def arrived(self, status: MPI.Status) -> None:
        self.received = status.Get_count(MPI.BYTE)
        self.stats.messages_recv += 1
        self.stats.bytes_recv += self.received


def named_failure(mpi_comm: MPI.Comm, err: MPI.Exception, rank: int | None = None,
                  buf: np.ndarray | None = None, source: int = 0, tag: int = 0) -> Exception:
    """``PeerFailed`` naming the failed ranks when ``err`` is MPI's process failure (ULFM);
    for a receive (``rank``, ``buf``, ``source``, ``tag``) whose message was longer than its
    buffer, the in-process transport's ``ValueError``; else ``err`` itself."""
    error = err.Get_error_class()
    if error == MPI.ERR_TRUNCATE and buf is not None:
        return ValueError(f"rank {rank}: recv from rank {source} tag {tag}: message is "
                          f"longer than the buffer's {buf.nbytes} bytes ({buf.size} x "
                          f"{buf.dtype})")
    if error not in (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING):
        return err
    failed = mpi_comm.Get_failed()
    ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())),
                                      mpi_comm.Get_group())
    failed.Free()
    return PeerFailed(sorted(ranks), err.Get_error_string())


def _check_contiguous(buf: np.ndarray, what: str) -> None:
    if not ((isinstance(buf, np.ndarray) or backend.on_gpu(buf)) and buf.flags.c_contiguous):
        raise ValueError(f"{what} needs a C-contiguous numpy array "
                         f"(use np.ascontiguousarray), got {type(buf).__name__}")


def _world_ranks(mpi_comm: MPI.Comm) -> list[int]:
    """World rank of each member (trace lines say which process talks to which)."""
    group, world = mpi_comm.Get_group(), MPI.COMM_WORLD.Get_group()
    ranks = group.Translate_ranks(list(range(mpi_comm.Get_size())), world)
    group.Free()
    world.Free()
    return list(ranks)
