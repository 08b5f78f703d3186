"""A communicator lent to the student's code: its messages pass through the grader's fabric.

A multi-rank check runs the student's function on in-process ranks
(``ranks.run_ranks``): ``ring_shift(inputs[c.rank], c)`` on every rank. When
the lab is graded, that function is a ``Remote`` (the student's, in the
kernel) and the ranks, their fabric, counters and modelled clock are the
grader's. A communicator cannot cross as data, so it is *lent*: the call
carries a ``$comm`` marker, and the kernel hands the student's function a
:class:`RelayedCommunicator`, every operation of which (send, recv, isend,
irecv, a request's wait, sendrecv, combine, barrier, ...) is a call back to
the grader. There :class:`Lending` does it on the rank's own communicator,
in that rank's turn, and answers with data only: the received array, a
request's number, the rank's counters and clock.

On each side the student's ranks take turns: in the grader as the
transport's greenlets, in the kernel as one greenlet per call (``serve.py``),
resumed only with the answer to its last call back. The two move in
lockstep, so the only thing the kernel's code decides is which operations
it asks for; what they moved, between whom, and what they cost is counted
in the grader, where the check reads it.

Buffers cross as what the transport checks: a send's array with its
layout (``outgoing``), a receive's shape, dtype and layout (``incoming``),
so the grader's communicator refuses what it would refuse in the kernel,
in the same words. The array a receive filled comes back and is copied
into the student's buffer.
"""

from __future__ import annotations

import builtins
import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from minidist.comm import errors
from minidist.comm.ops import reduce_into
from minidist.comm.transport.communicator import Communicator, Request
from minidist.comm.transport.stats import LocalStats
from minidist.labkit import wire

COUNTERS = ("messages_sent", "bytes_sent", "messages_recv", "bytes_recv")
METHODS = {  # what the student's code may ask of each kind of lent object
    "comm": frozenset({"send", "recv", "isend", "irecv", "sendrecv", "wait_any", "barrier",
                       "split", "dup", "combine", "compute", "price_as_part_of"}),
    "request": frozenset({"wait", "test"}),
}


def lendable(value: Any) -> bool:
    """Whether ``value`` is lent rather than sent: a communicator (or a check's wrapper
    of one, ``ranks.MessageLog``) or a request."""
    from minidist.labkit.ranks import MessageLog

    return isinstance(value, (Communicator, MessageLog, Request))


# ---- the grader's side --------------------------------------------------------------------

class Lending:
    """What one call of the student's code borrows from the grader, by number: a rank's
    communicators and the requests they made. ``numbers`` is the session's, so that a
    number lent to one call never names an object of another."""

    def __init__(self, numbers: Iterator[int]) -> None:
        self.numbers = numbers
        self.objects: dict[int, tuple[str, Any]] = {}
        self.receives: dict[int, np.ndarray] = {}  # id(request) -> the buffer it fills
        self.stats: Any = None  # the rank's counters, shared by all its communicators
        self.modelled = False
        self.raised: Exception | None = None  # the last error an operation raised

    def lend(self, obj: Any) -> dict:
        number = next(self.numbers)
        if isinstance(obj, Request):
            self.objects[number] = ("request", obj)
            return {"$request": number}
        from minidist.labkit.ranks import reads_the_modelled_clock

        self.objects[number] = ("comm", obj)
        if self.stats is None:
            self.stats, self.modelled = obj.stats, reads_the_modelled_clock()
        return {"$comm": [number, obj.rank, obj.size, self.modelled]}

    def resolve(self, kind: str, payload: Any) -> Any:
        """A lent object named in the student's call back (``$comm``, ``$request``)."""
        number = payload[0] if kind == "$comm" and isinstance(payload, list) else payload
        lent = self.objects.get(number) if isinstance(number, int) else None
        if lent is None or lent[0] != kind[1:]:
            raise wire.WireError(f"{kind} {payload!r:.40} was not lent to this call")
        return lent[1]

    def state(self) -> dict:
        """The rank's counters and clocks, as the student's ``c.stats`` shows them."""
        stats = self.stats
        state = {name: getattr(stats, name) for name in COUNTERS}
        state.update(clock=getattr(stats, "clock", 0.0), rounds=getattr(stats, "rounds", 0))
        return state

    def answer(self, call: Any, task: int, decode: Callable[[Any], Any]) -> dict:
        """Do what the student's code asked (``call``: the kernel's ``{"task", "queued",
        "on", "method", "args"}``): the queued operations, then the one it waits for (if
        any); its result, or the error one of them raised, for the kernel."""
        if not (isinstance(call, dict) and call.get("task") == task):
            raise wire.WireError("a call back must name its task")
        try:
            self.replay(call.get("queued", []), decode)
            if call.get("method") is None:  # only the queue (before a clock is read)
                return {"value": None}
            return {"value": self._do(call, decode)}
        except wire.WireError:
            raise
        except Exception as error:  # the operation's own error: the student's code sees it
            self.raised = error
            return {"error": [type(error).__name__, str(error)[:2000]]}

    def replay(self, queued: Any, decode: Callable[[Any], Any]) -> None:
        """Do the operations the student's code queued (those whose result it did not
        wait for), in order; a request one made is lent under the number the kernel
        gave it (negative, so that it names nothing of the grader's)."""
        if not isinstance(queued, list):
            raise wire.WireError("queued operations must be a list")
        for op in queued:
            result = self._do(op, decode)
            number = op.get("number")
            if number is not None:
                if not (isinstance(number, int) and number < 0 and number not in self.objects
                        and isinstance(result, Request)):
                    raise wire.WireError("a queued request needs a new negative number")
                self.objects[number] = ("request", result)

    def _do(self, op: Any, decode: Callable[[Any], Any]) -> Any:
        if not (isinstance(op, dict) and isinstance(op.get("on"), int)
                and op["on"] in self.objects):
            raise wire.WireError("an operation must name an object lent to this call")
        kind, target = self.objects[op["on"]]
        method = op.get("method")
        if method not in METHODS[kind]:
            raise wire.WireError(f"{method!r:.40} cannot be called on a lent {kind}")
        args = decode(op.get("args"))
        if not isinstance(args, list):
            raise wire.WireError("an operation's arguments must be a list")
        return self._perform(kind, target, method, args)

    def _perform(self, kind: str, target: Any, method: str, args: list) -> Any:
        if kind == "request":
            done = target.test() if method == "test" else target.wait() or True
            return [done, self.receives.get(id(target)) if done else None]
        if method in ("send", "isend"):
            return getattr(target, method)(outgoing(args[0]), *args[1:])
        if method in ("recv", "irecv"):
            buf = incoming(args[0])
            result = getattr(target, method)(buf, *args[1:])
            if method == "irecv":
                self.receives[id(result)] = buf
            return result
        if method == "sendrecv":
            sendbuf = outgoing(args[0])
            recvbuf = sendbuf if args[2] == "same" else incoming(args[2])
            return target.sendrecv(sendbuf, args[1], recvbuf, *args[3:])
        if method == "wait_any":
            index = target.wait_any(args[0])
            return [index, self.receives.get(id(args[0][index]))]
        if method == "combine":  # the kernel reduced the values; the shapes are charged here
            return target.combine(args[0], incoming(args[1]), incoming(args[2]), *args[3:])
        return getattr(target, method)(*args)  # barrier, split, dup, compute, price_as_part_of


def outgoing(spec: Any) -> Any:
    """A buffer the student's code sends, as it was: its values and its layout."""
    if not isinstance(spec, dict):
        raise wire.WireError("a buffer must be described by a dict")
    if "type" in spec:
        return stand_in(spec["type"])
    data = spec.get("data")
    if not isinstance(data, np.ndarray):
        raise wire.WireError("a buffer's data must be an array")
    return laid_out(data, spec)


def incoming(spec: Any) -> Any:
    """A buffer the student's code receives into: its shape, dtype and layout (its values
    do not matter: a receive overwrites them all)."""
    if not isinstance(spec, dict):
        raise wire.WireError("a buffer must be described by a dict")
    if "type" in spec:
        return stand_in(spec["type"])
    try:
        shape, dtype = tuple(int(n) for n in spec["shape"]), np.dtype(str(spec["dtype"]))
        if dtype.kind not in wire.ARRAY_KINDS or min(shape, default=0) < 0:
            raise ValueError("numbers only")
        if int(np.prod(shape)) * dtype.itemsize > wire.MAX_MESSAGE_CHARS:
            raise ValueError("too large")
        data = np.zeros(shape, dtype)
    except (KeyError, TypeError, ValueError) as error:
        raise wire.WireError(f"a receive buffer was refused ({error})") from None
    return laid_out(data, spec)


def laid_out(data: np.ndarray, spec: dict) -> np.ndarray:
    """``data``, not C-contiguous or not writeable where the student's buffer was not."""
    if not spec.get("contiguous", True) and data.size > 1:
        strided = np.zeros(2 * data.size, data.dtype)[::2].reshape(data.shape)
        strided[...] = data
        data = strided
    if not spec.get("writeable", True):
        data.flags.writeable = False
    return data


def stand_in(name: Any) -> Any:
    """An object of a class named as the student's buffer was (a list, a float): the
    transport refuses it, naming its type."""
    name = name if isinstance(name, str) and name.isidentifier() else "object"
    return type(name, (), {})()


# ---- the kernel's side --------------------------------------------------------------------

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
        return RelayedRequest(self, op["number"], request_buf)

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


def rebuilt_error(name: Any, message: Any) -> Exception:
    """The grader's error, raised in the student's code: a builtin or a ``minidist.comm``
    error of that name, or an exception class of that name."""
    name = name if isinstance(name, str) and name.isidentifier() else "Exception"
    known = getattr(builtins, name, None) or getattr(errors, name, None)
    if isinstance(known, type) and issubclass(known, Exception):
        try:
            return known(str(message))
        except TypeError:  # a class that wants more than a message
            pass
    return type(name, (Exception,), {"__module__": "grader"})(str(message))


def sent(buf: Any) -> dict:
    """What the grader needs of a buffer the student sends: its values and layout."""
    if not isinstance(buf, np.ndarray):
        return {"type": type(buf).__name__}
    return {"data": buf, "contiguous": bool(buf.flags.c_contiguous),
            "writeable": bool(buf.flags.writeable)}


def space(buf: Any) -> dict:
    """What the grader needs of a buffer the student receives into: shape, dtype, layout."""
    if not isinstance(buf, np.ndarray):
        return {"type": type(buf).__name__}
    return {"shape": list(buf.shape), "dtype": buf.dtype.str,
            "contiguous": bool(buf.flags.c_contiguous), "writeable": bool(buf.flags.writeable)}


def fill(buf: np.ndarray, data: Any) -> None:
    """Copy what the grader received into the student's buffer."""
    if not (isinstance(data, np.ndarray) and data.shape == buf.shape):
        raise wire.WireError("the grader's answer does not fit the receive buffer")
    buf[...] = data


class RelayedRequest(Request):
    """A request made through a :class:`RelayedCommunicator`: the wait of a send is
    queued; the wait of a receive, and ``test``, ask the grader, and a completed receive
    lands in the student's buffer."""

    def __init__(self, link: Link, number: int, buf: np.ndarray | None) -> None:
        self.link, self.number, self.buf = link, number, buf

    def wait(self) -> None:
        if self.buf is None:
            self.link.queue(self.number, "wait")
        else:
            self.test(method="wait")

    def test(self, method: str = "test") -> bool:
        done, data = self.link.call(self.number, method)
        if done and self.buf is not None:
            fill(self.buf, data)
        return bool(done)


class RelayedCommunicator(Communicator):
    """Rank ``rank`` of ``size`` as the student's code holds it in the kernel: every
    operation is done by the grader, on the rank's own communicator (module docstring)."""

    def __init__(self, link: Link, number: int, rank: int, size: int) -> None:
        self.link, self.number, self.rank, self.size = link, number, rank, size

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
            fill(requests[index].buf, data)
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
