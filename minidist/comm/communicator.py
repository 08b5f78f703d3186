"""The Communicator interface: what every transport offers and every algorithm uses.

Collectives and allreduce algorithms are written once against these methods;
two transports implement them: MPI (``mpi_transport.py``) and ranks-as-threads
in one process (``local_transport.py``). Buffers are contiguous arrays; a
receive fills the array it is given (no pickling on a hot path).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from minidist.comm.stats import CommStats


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

    ``stats`` counts this rank's messages and bytes (``minidist.comm.stats``).
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
    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 sendtag: int = 0, recvtag: int = 0) -> np.ndarray:
        """Send to ``dest`` and receive from ``source`` at once (no deadlock in a ring)."""

    @abstractmethod
    def barrier(self) -> None:
        """Return only when every rank has entered the barrier."""

    @abstractmethod
    def split(self, color: int, key: int = 0) -> Communicator:
        """Ranks with the same ``color`` form a new communicator, ordered by ``key``."""

    def combine(self, op: str, acc: np.ndarray, incoming: np.ndarray) -> None:
        """``acc = op(acc, incoming)`` in place: the local reduction step of a collective.

        Transports that model time charge gamma per byte reduced here.
        """
        from minidist.comm.ops import apply_op

        apply_op(op, acc, incoming)

    def compute(self, seconds: float) -> None:  # noqa: B027 (a hook, empty on purpose)
        """Account ``seconds`` of local work: a modelled clock advances; real time needs nothing."""
