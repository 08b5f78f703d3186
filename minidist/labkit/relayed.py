"""The kernel's side of a lent communicator: the student's code holds these objects.

A communicator the grader lends to a call of the student's code
(``relay.py``) is, in the kernel, a :class:`RelayedCommunicator`: every
operation is a call back to the grader, which does it on the rank's own
communicator and answers with data. :class:`Link` is the way back for one
call (the task ``serve.py`` runs it in) and the rank's counters as the
grader last reported them. Nothing here is trusted: the student's code may
change it, which changes only what it asks of the grader.

A lent object outlives its call when the student's code keeps it (a
Function's ``ctx.c``, an optimiser's ``self.comm``): used in a later call,
it calls back through that call's link (``RUNNING``), and the grader
answers if the object is that call's rank's (it lends an object under one
number for the whole check cell, ``relay.Lending``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from minidist.comm import Communicator, LocalStats, Request
from minidist.comm.ops import reduce_into
from minidist.labkit import wire
from minidist.labkit.relay import COUNTERS
from minidist.labkit.relayed_values import fill, rebuilt_error, sent, space

RUNNING: list[Link] = []  # the link of the call running now (serve.py pushes and pops it)


class Lent:
    """A lent object of the kernel's side: it calls back through the link of the call
    running now, or its own when none runs."""

    _link: Link

    @property
    def link(self) -> Link:
        return RUNNING[-1] if RUNNING else self._link


class Link:
    """The kernel's end of one call's lending: how its code calls back to the grader
    (``back``: switch to the serving greenlet, which returns the call to the grader and
    resumes here with the answer) and the rank's counters as last reported.

    An operation whose result the code does not wait for (a send, an isend or irecv
    and the wait of a send, combine, compute, a barrier) is queued, not sent: the queue
    goes with the next call back, or with the reply when the call returns, and the
    grader does it first, in order. So a round trip is paid only where the code needs
    an answer (a receive's data), and the grader's rank does the same operations in the
    same order as if each had been sent at once."""

    def __init__(self, task: int, back: Callable[[dict], dict]) -> None:
        self.task, self.back = task, back
        self.stats = LocalStats()
        self.modelled = False
        self.queued: list[dict] = []
        self.proposed = itertools.count(-1, -1)  # numbers of queued requests

    def resolve(self, kind: str, payload: Any) -> Any:
        """The student's side of a lent object: ``$comm`` or ``$request`` from the grader."""
        if kind == "$request" and isinstance(payload, int):
            return RelayedRequest(self, payload, None)
        if kind == "$worker" and isinstance(payload, int):
            return RelayedWorker(self, payload)
        if kind == "$average" and isinstance(payload, int):
            return RelayedAverager(self, payload)
        if (kind == "$comm" and isinstance(payload, list) and len(payload) == 4
                and all(isinstance(v, int) for v in payload[:3])):
            number, rank, size, modelled = payload
            self.modelled = self.modelled or bool(modelled)
            return RelayedCommunicator(self, number, rank, size)
        raise wire.WireError(f"a {kind} value was refused here")

    def queue(self, number: int, method: str, *args: Any, request_buf: Any = False) -> Any:
        """Queue ``method`` on lent object ``number``; a request (``request_buf`` its
        receive buffer, or None for a send) gets a number of its own."""
        op = {"on": number, "method": method,
              "args": wire.encode(list(args), _marker_of_relayed)}
        self.queued.append(op)
        if request_buf is False:
            return None
        op["number"] = next(self.proposed)
        return RelayedRequest(self, op["number"], request_buf, upto=method == "irecv_upto")

    def take_queue(self) -> list[dict]:
        """The queued operations, for the reply that ends the call."""
        queued, self.queued = self.queued, []
        return queued

    def flush(self) -> None:
        """Send the queue now (the code reads the counters or the clock)."""
        if self.queued:
            self.call(None, None)

    def call(self, number: int | None, method: str | None, *args: Any) -> Any:
        """Ask the grader to do the queue, then ``method`` on lent object ``number``;
        its result."""
        request = {"task": self.task, "queued": self.take_queue(), "on": number,
                   "method": method, "args": wire.encode(list(args), _marker_of_relayed)}
        answer = self.back(request)
        state = answer.get("state", {})
        for name in COUNTERS:
            setattr(self.stats, name, int(state.get(name, 0)))
        self.stats.seconds.now = float(state.get("clock", 0.0))
        self.stats.latencies.now = float(state.get("rounds", 0))
        if "error" in answer:
            raise rebuilt_error(*(list(answer["error"]) + ["", ""])[:2])
        return wire.decode(answer.get("value"), self.resolve,
                           frozenset({"$comm", "$request"}))

    @contextmanager
    def clock(self) -> Iterator[None]:
        """While the student's code runs, ``time.perf_counter()`` reads this rank's modelled
        clock, if the check asked for it (``ranks.run_ranks(modelled_perf_counter=True)``)."""
        real = time.perf_counter

        def modelled() -> float:
            self.flush()
            return self.stats.clock

        if self.modelled:
            time.perf_counter = modelled
        try:
            yield
        finally:
            time.perf_counter = real


def _marker_of_relayed(value: Any) -> dict | None:
    return {"$request": value.number} if isinstance(value, RelayedRequest) else None


class RelayedRequest(Lent, Request):
    """A request made through a :class:`RelayedCommunicator`: the wait of a send is
    queued; the wait of a receive, and ``test``, ask the grader, and a completed receive
    lands in the student's buffer."""

    def __init__(self, link: Link, number: int, buf: np.ndarray | None,
                 upto: bool = False) -> None:
        self._link, self.number, self.buf, self.upto = link, number, buf, upto
        self.received: int | None = None  # an irecv_upto's bytes, once complete

    def wait(self) -> None:
        if self.buf is None:
            self.link.queue(self.number, "wait")
        else:
            self.test(method="wait")

    def test(self, method: str = "test") -> bool:
        done, data = self.link.call(self.number, method)
        if done and self.buf is not None:
            self.arrived(data)
        return bool(done)

    def arrived(self, data: Any) -> None:
        fill(self.buf, data, self.upto)
        self.received = data.nbytes


class RelayedObject(Lent):
    """An object lent by its methods (``relay.BY_METHODS``): each is done by the grader's."""

    def __init__(self, link: Link, number: int) -> None:
        self._link, self.number = link, number


class RelayedWorker(RelayedObject):
    """A parameter server's worker lent to the student's code (Lab 6): its ``pull`` and
    ``push`` are done by the grader's worker, on the rank's own communicator."""

    def pull(self, keys: Any) -> np.ndarray:
        return self.link.call(self.number, "pull", keys)

    def push(self, keys: Any, gradient: Any) -> Any:
        return self.link.call(self.number, "push", keys, gradient)


class RelayedAverager(RelayedObject):
    """Lab 4's gradient averager lent to the student's code: its ``average`` is done by the
    grader's, on the rank's own communicator."""

    def average(self, grads: Any) -> Any:
        return self.link.call(self.number, "average", grads)


class RelayedCommunicator(Lent, Communicator):
    """Rank ``rank`` of ``size`` as the student's code holds it in the kernel: every
    operation is done by the grader, on the rank's own communicator (module docstring)."""

    def __init__(self, link: Link, number: int, rank: int, size: int) -> None:
        self._link, self.number, self.rank, self.size = link, number, rank, size

    @property
    def stats(self) -> LocalStats:
        """The rank's counters and clock, as the grader reports them."""
        self.link.flush()
        return self.link.stats

    def _call(self, method: str, *args: Any) -> Any:
        return self.link.call(self.number, method, *args)

    def _queue(self, method: str, *args: Any, request_buf: Any = False) -> Any:
        return self.link.queue(self.number, method, *args, request_buf=request_buf)

    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        self._queue("send", sent(buf), dest, tag)

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        return self._queue("isend", sent(buf), dest, tag, request_buf=None)

    def recv(self, buf: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        fill(buf, self._call("recv", space(buf), source, tag))
        return buf

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        return self._queue("irecv", space(buf), source, tag, request_buf=buf)

    def irecv_upto(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        return self._queue("irecv_upto", space(buf), source, tag, request_buf=buf)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 sendtag: int = 0, recvtag: int = 0) -> np.ndarray:
        into = "same" if recvbuf is sendbuf else space(recvbuf)
        fill(recvbuf, self._call("sendrecv", sent(sendbuf), dest, into, source, sendtag,
                                 recvtag))
        return recvbuf

    def wait_any(self, requests: Any) -> int:
        requests = list(requests)
        index, data = self._call("wait_any", requests)
        if requests[index].buf is not None and data is not None:
            requests[index].arrived(data)
        return index

    def barrier(self) -> None:
        self._queue("barrier")

    def split(self, color: int, key: int = 0) -> Communicator:
        return self._call("split", color, key)

    def dup(self) -> Communicator:
        return self._call("dup")

    def combine(self, op: str, acc: np.ndarray, incoming: np.ndarray,
                incoming_first: bool = False) -> None:
        """Reduced here, on the student's arrays; the grader charges and counts the bytes."""
        reduce_into(op, acc, incoming, incoming_first)
        self._queue("combine", op, space(acc), space(incoming), incoming_first)

    def compute(self, seconds: float) -> None:
        self._queue("compute", seconds)

    def price_as_part_of(self, nbytes: int | None) -> None:
        self._queue("price_as_part_of", nbytes)
