"""The grader's side of a check: the student's objects seen from another process.

When a lab is graded, its check cells do not run in the student's kernel.
The grader runs them in its own process (``minidist.course.trusted``), and
every name the check uses that the notebook defined (``unbroadcast``,
``Mul``, ``MomentumSGD``) is a ``Remote``: a reference to the object in the
kernel. Calling it sends the arguments as data (``wire.py``; tensors as
mirrors, ``mirror.py``) and returns the result as data, or as another
``Remote`` when the result is not data (a model, an optimiser). What the
student's code does in its kernel can change what comes back, never the
check that reads it: the check, its expected values and its verdict live
here.

A tensor a check hands to the student's code is the student's to change
(an optimiser updates it in place, a backward pass sets its ``.grad``), so a
check computes its expected values before the call, or from copies.

A check written once serves both places. Where a check must drive a
student's object more finely than by calls (a Function's ``forward`` and
``backward`` on one context), it names a probe, a function of ``labkit``
that takes the object and data and returns data: ``on_student(probe, obj,
...)`` runs it here on a local object (a student in JupyterLab, the test
suite) and in the kernel on a ``Remote`` one.
"""

from __future__ import annotations

import builtins
import itertools
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.labkit import wire
from minidist.labkit.blocking import BlockedError, active_blocks
from minidist.labkit.mirror import Mirrors
from minidist.labkit.relay import Lending, lendable

MAX_MESSAGE_CHARS = 2000  # of an exception message from the kernel


class Remote:
    """An object of the student's kernel, named by a path: ``("name", "Mul")`` and
    attributes, or ``("handle", 3)`` for a result the kernel kept."""

    __slots__ = ("_session", "_path")

    def __init__(self, session: Session, path: tuple):
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "_path", path)

    def __getattr__(self, name: str) -> Remote:
        if name.startswith("__"):
            raise AttributeError(name)
        return Remote(self._session, (*self._path, name))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a check cannot change the notebook's objects")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.request("call", self._path, None, args, kwargs)

    def __bool__(self) -> bool:
        raise TypeError(f"{self!r} is not a value a check can test")

    def __repr__(self) -> str:
        kind, base, *attrs = self._path
        name = f"result {base}" if kind == "handle" else str(base)
        return f"<{'.'.join([name, *attrs])} in the notebook>"


def on_student(probe: Callable[..., Any], obj: Any, *args: Any, **kwargs: Any) -> Any:
    """``probe(obj, *args, **kwargs)`` where ``obj`` lives: here, or in the student's
    kernel when ``obj`` is a ``Remote`` (``probe`` is then a function of ``labkit``)."""
    if isinstance(obj, Remote):
        return obj._session.request("probe", obj._path, probe, args, kwargs)
    return probe(obj, *args, **kwargs)


def process_of(obj: Any) -> int | None:
    """The pid of the process ``obj`` lives in: the kernel's for a ``Remote`` (None when the
    grader cannot tell it), this one's otherwise."""
    return obj._session.pid if isinstance(obj, Remote) else os.getpid()


def name_of(obj: Any) -> str:
    """The name a check's sentence gives a student's class or function: its ``__name__``
    here, its name in the notebook when it is a ``Remote``."""
    return str(obj._path[-1]) if isinstance(obj, Remote) else obj.__name__


def _rebuilt_exception(name: Any, message: Any) -> BaseException:
    """The student's exception, as a class of the same name that holds only its message."""
    from minidist.labkit.checks import CheckFailed

    name = name if isinstance(name, str) and name.isidentifier() else "Exception"
    message = str(message)[:MAX_MESSAGE_CHARS]
    if name in ("BlockedError", "CheckFailed"):  # (a probe's sentence; it can only fail)
        return {"BlockedError": BlockedError, "CheckFailed": CheckFailed}[name](message)
    known = getattr(builtins, name, None)
    rebuilt = None
    if isinstance(known, type) and issubclass(known, Exception):
        try:
            rebuilt = known(message)
        except TypeError:  # a class that wants more than a message
            pass
    if rebuilt is None:
        rebuilt = type(name, (Exception,), {"__module__": "notebook"})(message)
    rebuilt.raised_by_student = True  # raised here, in labkit, but by the kernel's code
    return rebuilt


class Session:
    """One check cell's connection to the kernel: ``channel(text) -> text`` carries a
    request and brings back the reply (``minidist.course.trusted`` provides it).

    A call that lends the student's code a communicator (``relay.py``) runs in the
    kernel as a task: until it returns, each reply may instead be a call back, which
    :class:`~minidist.labkit.relay.Lending` does here before the task is resumed."""

    ALLOW = frozenset({"$tensor", "$ref", "$view", "$step"})

    def __init__(self, channel: Callable[[str], str]):
        self.channel = channel
        self.pid: int | None = getattr(channel, "pid", os.getpid())  # where the kernel runs
        self.mirrors = Mirrors(first_id=1, step=1)
        self.numbers = itertools.count(1)  # of tasks and lent objects, never reused
        self.lent: dict[int, tuple[Any, int]] = {}  # id -> (object, its number): relay.py

    def name(self, name: str) -> Remote:
        return Remote(self, ("name", name))

    def _refer(self, value: Any, pending: list, lending: Lending | None) -> dict | None:
        from minidist.autograd import Tensor
        from minidist.data import Dataset

        if isinstance(value, Tensor):
            return self.mirrors.refer(value, pending, lambda v: self._encode(v, pending), True)
        if isinstance(value, Remote):
            return {"$ref": list(value._path)}
        if isinstance(value, Dataset):
            fields = {k: getattr(value, k) for k in ("x", "y", "num_classes", "name")}
            return {"$dataset": self._encode(fields, pending)}
        if isinstance(value, type) and value.__module__.startswith("minidist."):
            return {"$class": f"{value.__module__}:{value.__qualname__}"}
        step = wire.step_marker(value)
        if step is not None:
            return step
        if lending is not None and lendable(value):
            return lending.lend(value)
        return None

    def _encode(self, value: Any, pending: list, lending: Lending | None = None,
                arrays: list | None = None) -> Any:
        """``value`` as data; arrays it holds are appended to ``arrays`` (in the order the
        kernel reads them), communicators and requests lent through ``lending``."""
        record = None if arrays is None else (lambda array: arrays.append(array))
        return wire.encode(value, lambda v: self._refer(v, pending, lending), on_array=record)

    def _resolve(self, kind: str, payload: Any, arrays: list) -> Any:
        if kind == "$tensor" and payload in self.mirrors.tensors:
            return self.mirrors.tensors[payload]
        if kind == "$ref" and isinstance(payload, list) and payload[:1] == ["handle"]:
            return Remote(self, tuple(payload))
        if kind == "$view":
            return wire.rebuilt_view(payload, arrays)
        if kind == "$step":
            return wire.rebuilt_step(payload)
        raise wire.WireError(f"the kernel sent an unknown {kind} {payload!r:.40}")

    def _decode(self, data: Any, arrays: list = ()) -> Any:
        return wire.decode(data, lambda kind, payload: self._resolve(kind, payload, arrays),
                           self.ALLOW)

    def request(self, op: str, path: tuple, probe: Callable[..., Any] | None,
                args: tuple, kwargs: dict) -> Any:
        """Send one call to the kernel; answer its calls back; sync the mirrored tensors
        and the arrays it changed; return its result."""
        pending: list = []
        arrays: list = []
        lending = Lending(self.numbers, self.lent)
        message = {"op": op, "path": list(path),
                   "args": self._encode(tuple(args), pending, lending, arrays),
                   "kwargs": self._encode(dict(kwargs), pending, lending, arrays),
                   "blocked": active_blocks()}
        if probe is not None:
            message["probe"] = f"{probe.__module__}:{probe.__qualname__}"
        message["tensors"] = pending + self.mirrors.changed()
        task = message["task"] = next(self.numbers) if lending.objects else None
        reply = wire.loads(self.channel(json.dumps(message)))
        lent = lambda data: wire.decode(data, lending.resolve,  # noqa: E731
                                        frozenset({"$comm", "$request"}))
        while "call" in reply:  # the student's code asks the grader to communicate
            resume = lending.answer(reply["call"], task, lent)
            if "value" in resume:
                resume["value"] = self._encode(resume["value"], [], lending)
            resume.update(op="resume", task=task, state=lending.state(),
                          blocked=active_blocks())
            reply = wire.loads(self.channel(json.dumps(resume)))
        if reply.get("queued"):  # done before the code returned: an error is the rank's
            lending.replay(reply["queued"], lent)
        self.mirrors.apply(reply.get("tensors", []), self._decode, None)
        write_back(reply.get("arrays", []), arrays, self._decode)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], list) else ["Exception", ""]
            name, message_text = (error + ["", ""])[:2]
            raised = lending.raised
            if raised is not None and [name, message_text] == [type(raised).__name__,
                                                               str(raised)[:2000]]:
                raise raised  # the grader's own error (a deadlock, a bad peer), passed through
            raise _rebuilt_exception(name, message_text)
        return self._decode(reply.get("value"), arrays)


def write_back(changed: Any, arrays: list, decode: Callable[[Any], Any]) -> None:
    """Copy into this side's arrays of a request what the student's code changed in place."""
    if not isinstance(changed, list):
        raise wire.WireError("changed arrays must be a list")
    for item in changed:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                and 0 <= item[0] < len(arrays)):
            raise wire.WireError("a changed array must name an array of the request")
        data = decode(item[1])
        if not (isinstance(data, np.ndarray) and data.shape == arrays[item[0]].shape):
            raise wire.WireError("a changed array must keep its shape")
        np.copyto(arrays[item[0]], data, casting="unsafe")
