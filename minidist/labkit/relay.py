"""A communicator lent to the student's code: its messages pass through the grader's fabric.

A multi-rank check runs the student's function on in-process ranks
(``ranks.run_ranks``): ``ring_shift(inputs[c.rank], c)`` on every rank. When
the lab is graded, that function is a ``Remote`` (the student's, in the
kernel) and the ranks, their fabric, counters and modelled clock are the
grader's. A communicator cannot cross as data, so it is *lent*: the call
carries a ``$comm`` marker, and the kernel hands the student's function a
``RelayedCommunicator`` (``relayed.py``), every operation of which (send,
recv, isend, irecv, a request's wait, sendrecv, combine, barrier, ...) is a
call back to the grader. There :class:`Lending` does it on the rank's own
communicator, in that rank's turn, and answers with data only: the received
array, a request's number, the rank's counters and clock. Operations whose
result the code does not wait for are queued in the kernel and done here
first, in order, with the next call that needs an answer
(:meth:`Lending.replay`), so a round trip is paid per receive.

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

A parameter server's worker (Lab 6) is lent the same way (``$worker``):
its ``pull`` and ``push`` are done by the grader's worker on the rank's
communicator, so what reaches the servers is counted on the grader's ranks.
So is Lab 4's gradient averager (``$average``): its ``average`` is done by
the grader's, which keeps the gradients each rank handed it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from minidist.comm import Communicator, Request
from minidist.labkit import wire

COUNTERS = ("messages_sent", "bytes_sent", "messages_recv", "bytes_recv")
METHODS = {  # what the student's code may ask of each kind of lent object
    "comm": frozenset({"send", "recv", "isend", "irecv", "irecv_upto", "sendrecv", "wait_any",
                       "barrier", "split", "dup", "combine", "compute", "price_as_part_of"}),
    "request": frozenset({"wait", "test"}),
    "worker": frozenset({"pull", "push"}),
    "average": frozenset({"average"}),
}
BY_METHODS = ("worker", "average")  # lent objects that are not communicators or requests


@functools.cache
def lent_kinds() -> dict[str, type]:
    """The classes of the objects lent by their methods (``BY_METHODS``), by kind (looked
    up once: ``lendable`` asks of every value a call carries)."""
    from minidist.labkit.lab04_ranks import GradientAverager
    from minidist.parallel.ps.worker import Worker

    return {"worker": Worker, "average": GradientAverager}


def lendable(value: Any) -> bool:
    """Whether ``value`` is lent rather than sent: a communicator (or a check's wrapper
    of one, ``ranks.MessageLog``), a request, a parameter server's worker or Lab 4's
    gradient averager."""
    from minidist.labkit.ranks import MessageLog

    return isinstance(value, (Communicator, MessageLog, Request, *lent_kinds().values()))


class Lending:
    """What one call of the student's code borrows from the grader, by number: a rank's
    communicators and the requests they made. ``numbers`` is the session's, so that a
    number lent to one call never names another object in another call; ``known`` (the
    session's, by ``id``) lends an object lent before under the same number, so that
    what the student's code kept of it in the kernel reaches it in this call too. An
    operation may name only an object lent to this call, or a communicator of this
    call's rank lent to an earlier one (``_adopt``)."""

    def __init__(self, numbers: Iterator[int],
                 known: dict[int, tuple[Any, int]] | None = None) -> None:
        self.numbers, self.known = numbers, {} if known is None else known
        self.objects: dict[int, tuple[str, Any]] = {}
        self.receives: dict[int, np.ndarray] = {}  # id(request) -> the buffer it fills
        self.stats: Any = None  # the rank's counters, shared by all its communicators
        self.modelled = False
        self.raised: Exception | None = None  # the last error an operation raised

    def lend(self, obj: Any) -> dict:
        before = self.known.get(id(obj))
        number = before[1] if before is not None and before[0] is obj else next(self.numbers)
        self.known[id(obj)] = (obj, number)
        if isinstance(obj, Request):
            self.objects[number] = ("request", obj)
            return {"$request": number}
        from minidist.labkit.ranks import reads_the_modelled_clock

        kind = kind_of(obj)
        self.objects[number] = (kind, obj)
        if self.stats is None:
            self.stats = stats_of(obj)
            self.modelled = reads_the_modelled_clock()
        if kind in BY_METHODS:
            return {f"${kind}": number}
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

    def _adopt(self, number: int) -> None:
        """Lend to this call a communicator (or worker, or averager) of its rank that was lent
        to an earlier call of the check cell under ``number``: one the student's code kept (a
        Function's ``ctx.c``, an optimiser's ``self.comm``, a collective's duplicate)."""
        for obj, known in self.known.values():
            if (known == number and not isinstance(obj, Request) and self.stats is not None
                    and stats_of(obj) is self.stats):
                self.objects[number] = (kind_of(obj), obj)

    def _do(self, op: Any, decode: Callable[[Any], Any]) -> Any:
        on = op.get("on") if isinstance(op, dict) else None
        if isinstance(on, int) and on not in self.objects:
            self._adopt(on)
        if not (isinstance(on, int) and on in self.objects):
            raise wire.WireError("an operation must name an object lent to this call")
        kind, target = self.objects[on]
        method = op.get("method")
        if method not in METHODS[kind]:
            raise wire.WireError(f"{method!r:.40} cannot be called on a lent {kind}")
        args = decode(op.get("args"))
        if not isinstance(args, list):
            raise wire.WireError("an operation's arguments must be a list")
        return self._perform(kind, target, method, args)

    def _perform(self, kind: str, target: Any, method: str, args: list) -> Any:
        if kind in BY_METHODS:  # a worker's pull and push, an averager's average: the grader's
            return getattr(target, method)(*args)
        if kind == "request":
            done = target.test() if method == "test" else target.wait() or True
            return [done, self._received(target) if done else None]
        if method in ("send", "isend"):
            return getattr(target, method)(outgoing(args[0]), *args[1:])
        if method in ("recv", "irecv", "irecv_upto"):
            buf = incoming(args[0])
            result = getattr(target, method)(buf, *args[1:])
            if method != "recv":
                self.receives[id(result)] = buf
            return result
        if method == "sendrecv":
            sendbuf = outgoing(args[0])
            recvbuf = sendbuf if args[2] == "same" else incoming(args[2])
            return target.sendrecv(sendbuf, args[1], recvbuf, *args[3:])
        if method == "wait_any":
            index = target.wait_any(args[0])
            return [index, self._received(args[0][index])]
        if method == "combine":  # the kernel reduced the values; the shapes are charged here
            return target.combine(args[0], incoming(args[1]), incoming(args[2]), *args[3:])
        return getattr(target, method)(*args)  # barrier, split, dup, compute, price_as_part_of

    def _received(self, request: Request) -> np.ndarray | None:
        """What a completed receive brought: its buffer, or the part an ``irecv_upto``'s
        message filled."""
        buf = self.receives.get(id(request))
        received = getattr(request, "received", None)
        if buf is None or received is None:
            return buf
        return buf.reshape(-1)[:received // buf.itemsize]


def kind_of(obj: Any) -> str:
    """How a lent object other than a request is named: "comm", "worker" or "average"."""
    return next((kind for kind, cls in lent_kinds().items() if isinstance(obj, cls)), "comm")


def stats_of(obj: Any) -> Any:
    """The counters of the rank a lent communicator, worker or averager belongs to."""
    return (obj.c if kind_of(obj) in BY_METHODS else obj).stats


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
