"""The Communicator interface: what every transport offers and every algorithm uses.

Collectives and allreduce algorithms are written once against these methods;
two transports implement them: MPI (``transport/mpi.py``) and ranks-as-tasks
in one process (``transport/local.py``). Buffers are contiguous arrays; a
receive fills the array it is given (no pickling on a hot path).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from minidist.comm.ops import reduce_into
from minidist.comm.transport.stats import CommStats
from minidist.util.pages import page_aligned_empty

T = TypeVar("T")
SCRATCH_KEPT_FROM = 1 << 16  # bytes: scratch() keeps buffers from this size up


def is_rank(value: object, size: int) -> bool:
    """Whether ``value`` names a rank of a communicator of ``size``: an integer (Python's or
    numpy's, not a bool) in ``0..size-1``."""
    return (type(value) is int or isinstance(value, np.integer)) and 0 <= value < size


def check_point_to_point(rank: int, size: int, kind: str, peer: int, tag: int,
                         buf: object) -> None:
    """What a transport refuses of a send or receive, in the same words on every
    transport that checks in Python: a peer that is not an integer in ``0..size-1``, a
    tag that is not an integer >= 0, a buffer that is not a C-contiguous numpy array."""
    if not is_rank(peer, size):
        raise ValueError(f"rank {rank}: {kind} with rank {peer!r}, "
                         f"but the communicator has ranks 0..{size - 1}")
    if not isinstance(tag, (int, np.integer)) or tag < 0:
        raise ValueError(f"rank {rank}: {kind} tag must be an integer >= 0, got {tag!r}")
    if not (isinstance(buf, np.ndarray) and buf.flags.c_contiguous):
        raise ValueError(f"rank {rank}: {kind} needs a C-contiguous numpy array "
                         f"(use np.ascontiguousarray), got {type(buf).__name__}")


class Request(ABC):
    """A pending non-blocking send or receive."""

    @abstractmethod
    def wait(self) -> None:
        """Block until the operation has completed."""

    @abstractmethod
    def test(self) -> bool:
        """True when the operation has completed (progresses it if it can)."""


class Communicator(ABC):
    """A group of ``size`` ranks; this object is rank ``rank`` of it.

    ``stats`` counts this rank's messages and bytes (``minidist.comm.transport.stats``).
    """

    rank: int
    size: int
    stats: CommStats

    @abstractmethod
    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        """Blocking send of a contiguous array to rank ``dest``."""

    @abstractmethod
    def recv(self, buf: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        """Blocking receive from rank ``source`` into ``buf``; returns ``buf``."""

    @abstractmethod
    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Non-blocking send; ``buf`` must not change until the request completes."""

    @abstractmethod
    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        """Non-blocking receive into ``buf``."""

    @abstractmethod
    def irecv_upto(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        """Non-blocking receive of a message of at most ``buf``'s items (of its dtype; a
        host array) into its first items; once complete, the request's ``received``
        says how many bytes came. MPI lets any receive take a shorter message; here it
        is asked for by name, so that a plain ``irecv`` of the wrong size stays an
        error. A server that does not know how long a request is posts one of these
        (``parallel/ps/messages.py``)."""

    @abstractmethod
    def wait_any(self, requests: Sequence[Request]) -> int:
        """Block until one of ``requests`` completes; complete it and return its index
        (``MPI_Waitany``). A server that answers whichever client speaks first posts one
        receive per client and waits on all of them at once.

        The index may also be that of a request that can never complete (its peer
        failed or finished: the in-process transport knows); call its ``wait()``
        next, which returns at once for a completed one and raises for that one."""

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 sendtag: int = 0, recvtag: int = 0) -> np.ndarray:
        """Send to ``dest`` and receive from ``source`` at once (no deadlock in a ring):
        both posted, then both waited for. Returns ``recvbuf``."""
        receiving = self.irecv(recvbuf, source, recvtag)
        sending = self.isend(sendbuf, dest, sendtag)
        receiving.wait()
        sending.wait()
        return recvbuf

    @abstractmethod
    def barrier(self) -> None:
        """Return only when every rank has entered the barrier."""

    @abstractmethod
    def split(self, color: int, key: int = 0) -> Communicator:
        """Ranks with the same ``color`` form a new communicator, ordered by ``key``."""

    @abstractmethod
    def dup(self) -> Communicator:
        """The same ranks in a new context, as ``MPI_Comm_dup``: its messages never match
        this communicator's. It shares this one's counters (and modelled clock). Every
        rank must call it, in the same order as its other collective calls."""

    def private(self) -> Communicator:
        """The duplicate the library's collectives send on, made by the first collective
        and kept.

        A collective written as a lesson sends with the default tag, like the
        user's own messages; on a context of its own, none of its messages can
        match a receive the user posted, or be taken by one (MPI libraries keep
        such a duplicate for the same reason).
        """
        return self.kept("private", self.dup)

    def combine(self, op: str, acc: np.ndarray, incoming: np.ndarray,
                incoming_first: bool = False) -> None:
        """``acc = op(acc, incoming)`` in place: the local reduction step of a collective.

        In place, so that no step allocates a new array. Transports that
        model time charge gamma per byte reduced here (and only here). The
        collective has already checked ``op`` and the dtype (once, not at
        every step): this is one ufunc call.

        ``incoming_first=True`` computes ``op(incoming, acc)`` instead: the
        same number unless the operand order matters, as for
        ``max(+0.0, -0.0)`` or NaN payloads. An element reduced by one rank
        and then copied needs no rule; where two ranks reduce the same two
        vectors (recursive doubling's partners), both put the lower rank's
        first, so that they get the same bits.
        """
        reduce_into(op, acc, incoming, incoming_first)

    def kept(self, key: object, make: Callable[[], T]) -> T:
        """An object this communicator keeps between calls, made by ``make()`` on first use.

        Collectives keep their preallocated buffers here, so that a short
        call allocates nothing. Each communicator has its own (a communicator
        made by ``split`` too), so two threads on two communicators never
        share a buffer.
        """
        try:
            return self._kept[key]
        except AttributeError:
            self._kept: dict = {}
        except KeyError:
            pass
        found = self._kept[key] = make()
        return found

    def scratch(self, n: int, dtype: np.dtype, name: str = "scratch") -> np.ndarray:
        """A receive buffer the communicator keeps for you: ``n`` items of ``dtype``.

        Long ones come from one buffer that this communicator keeps and
        grows to the largest request: a fresh array of many MiB costs a page
        fault per page on first touch, on every call, several times the
        cost of reusing warm memory (README, Benchmarks). One collective at
        a time may hold it; the next call gets the same memory. Code that
        needs two at once (a parameter server's payload and its answer) names
        them: each ``name`` is a buffer of its own.
        """
        nbytes = n * np.dtype(dtype).itemsize
        if nbytes < SCRATCH_KEPT_FROM:  # numpy's own cache serves short arrays fast
            return np.empty(n, dtype)
        kept = self.kept(name, lambda: [np.empty(0, np.uint8)])
        if kept[0].nbytes < nbytes:
            kept[0] = page_aligned_empty(nbytes, np.uint8)  # starts a page: util/pages.py
        return kept[0][:nbytes].view(dtype)

    def price_as_part_of(self, nbytes: int | None) -> None:  # noqa: B027 (a hook)
        """Messages from now on belong to a collective on an ``nbytes`` vector (None: to
        nothing). Transports that model time price them at that size
        (``NetworkModel.at``); real ones have nothing to do."""

    def compute(self, seconds: float) -> None:  # noqa: B027 (a hook, empty on purpose)
        """Account ``seconds`` of local work: a modelled clock advances; real time needs nothing."""
