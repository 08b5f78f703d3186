"""The kernel's side of a graded check: answer the grader's calls with data.

The grader (``minidist.course.trusted``) sends each call as a message on a
unix socket, its line to the kernel for one check cell, which
``serve_line`` serves in the kernel while the check runs. ``answer`` finds
the named object in the notebook's namespace, calls it (or runs a
``labkit`` probe on it) with the decoded arguments, under the same
``blocked`` targets as the check, and the reply goes back on the line: the
result as data (``wire.py``), objects that are not data as handles kept here,
the tensors and argument arrays that changed, or the exception's name and
message. A call that was lent a communicator runs as a task that may reply
with a call back instead, and is resumed by the next request (``relay.py``,
``relayed.py``).

Nothing here is trusted: it runs beside the student's code, which may
replace it. That changes what the kernel replies, which the grader reads as
data and judges itself.
"""

from __future__ import annotations

import importlib
import json
import socket
import sys
from collections.abc import Callable
from typing import Any

from greenlet import greenlet

from minidist.labkit import relayed, wire
from minidist.labkit.blocking import blocked
from minidist.labkit.mirror import Mirrors, build_context, digest

ALLOW = frozenset({"$tensor", "$ref", "$class", "$dataset", "$step"})
# what the grader lends a call (relay.py)
LENT = frozenset({"$comm", "$request", "$worker", "$average"})
_state: dict[str, Any] = {}


def reset() -> None:
    """Forget the mirrored tensors, kept results and paused calls (a new check cell begins)."""
    _state.update(mirrors=Mirrors(first_id=-1, step=-1), handles={}, calls={})


def _namespace() -> dict:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


def _follow(path: Any) -> Any:
    if not isinstance(path, list) or len(path) < 2 or path[0] not in ("name", "handle"):
        raise wire.WireError("a reference must be a name or a handle path")
    kind, base, *attrs = path
    namespace = _state["namespace"]
    if kind == "handle":
        obj = _state["handles"][base]
    elif base in namespace:
        obj = namespace[base]
    else:
        raise NameError(f"name {base!r} is not defined")
    for name in attrs:
        obj = getattr(obj, str(name))
    return obj


def _import(dotted: Any) -> Any:
    module, _, name = str(dotted).partition(":")
    if not module.startswith("minidist."):
        raise wire.WireError(f"{dotted!r} is not a name of the minidist library")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _resolve(kind: str, payload: Any) -> Any:
    if kind == "$tensor":
        return _state["mirrors"].tensors[payload]
    if kind == "$ref":
        return _follow(payload)
    if kind == "$class":
        return _import(payload)
    if kind == "$step":
        return wire.rebuilt_step(payload)
    from minidist.data import Dataset

    return Dataset(**_decode(payload))


def _decode(data: Any) -> Any:
    return wire.decode(data, _resolve, ALLOW)


def _refer(value: Any, pending: list) -> dict:
    from minidist.autograd import Tensor

    if isinstance(value, Tensor):
        return _state["mirrors"].refer(value, pending, lambda v: _encode(v, pending), False)
    step = wire.step_marker(value)
    if step is not None:
        return step
    handles = _state["handles"]
    handles[len(handles)] = value
    return {"$ref": ["handle", len(handles) - 1]}


def _encode(value: Any, pending: list,
            on_array: Callable[[Any], dict | None] | None = None) -> Any:
    return wire.encode(value, lambda v: _refer(v, pending), on_array=on_array)


class Call:
    """One request of the grader's being answered: the student's object, the decoded
    arguments (their arrays numbered as the grader numbered them, ``wire.py``) and, when
    the grader lent a communicator (``relay.py``), the task it runs in: a greenlet that
    pauses at each call back to the grader and is resumed with the answer."""

    def __init__(self, request: dict) -> None:
        self.pending: list = []
        self.arrays: list = []
        task = request.get("task")
        self.link = relayed.Link(task, self._back) if isinstance(task, int) else None
        self.greenlet: Any = None
        _state["mirrors"].apply(request.get("tensors", []), _decode,
                                lambda f: build_context(f, _decode))
        target = _follow(request.get("path"))
        args, kwargs = self._decode(request.get("args")), self._decode(request.get("kwargs"))
        self.digests = [digest(array) for array in self.arrays]
        probe = _import(request.get("probe")) if request.get("op") == "probe" else None
        self.run = ((lambda: probe(target, *args, **kwargs)) if probe is not None
                    else (lambda: target(*args, **kwargs)))

    def _decode(self, data: Any) -> Any:
        def resolve(kind: str, payload: Any) -> Any:
            if kind in LENT and self.link is not None:
                return self.link.resolve(kind, payload)
            return _resolve(kind, payload)

        allow = ALLOW if self.link is None else ALLOW | LENT
        return wire.decode(data, resolve, allow, arrays=self.arrays)

    def _back(self, call: dict) -> dict:
        """From the task: hand ``call`` to the grader; the answer, once it comes."""
        if greenlet.getcurrent() is not self.greenlet:
            raise RuntimeError("this communicator belonged to a call that has ended")
        return self.greenlet.parent.switch(("call", call))

    def step(self, request: dict) -> dict:
        """Run the call (or resume its task with the answer in ``request``) until it
        returns, raises, or calls back; the reply."""
        with blocked(*[str(t) for t in request.get("blocked", [])]):
            try:
                if self.link is None:
                    event = ("done", self.run())
                else:
                    with self.link.clock():
                        relayed.RUNNING.append(self.link)
                        try:
                            if self.greenlet is None:
                                self.greenlet = greenlet(lambda: ("done", self.run()))
                                event = self.greenlet.switch()
                            else:
                                event = self.greenlet.switch(request)
                        finally:
                            relayed.RUNNING.pop()
                kind, value = event
                if kind == "call":
                    _state["calls"][self.link.task] = self
                    return {"call": value}
                reply = {"value": _encode(value, self.pending,
                                          lambda array: wire.view_of(array, self.arrays))}
            except BaseException as error:  # noqa: BLE001 (an interrupt too: the grader stopped it)
                reply = {"error": [type(error).__name__, str(error)[:2000]]}
        if self.link is not None:  # what the code queued before it returned or raised
            reply["queued"] = self.link.take_queue()
        reply["tensors"] = self.pending + _state["mirrors"].changed()
        reply["arrays"] = [[k, wire.encode(array, lambda _: None)]
                           for k, array in enumerate(self.arrays)
                           if digest(array) != self.digests[k]]
        return reply


def answer(text: str, namespace: dict | None = None) -> str:
    """The reply to one request, as JSON text; names are looked up in ``namespace``
    (default: the notebook's)."""
    if "mirrors" not in _state:
        reset()
    _state["namespace"] = _namespace() if namespace is None else namespace
    try:
        request = wire.loads(text)
        if request.get("op") == "reset":
            reset()
            return json.dumps({"value": None})
        if request.get("op") == "resume":
            call = _state["calls"].pop(request.get("task"), None)
            if call is None:
                raise wire.WireError("no call of that task is waiting for an answer")
        else:
            call = Call(request)
        reply = call.step(request)
    except BaseException as error:  # noqa: BLE001 (a request or a tensor that cannot be read)
        reply = {"error": [type(error).__name__, str(error)[:2000]]}
    return json.dumps(reply)


def serve_line(path: str) -> None:
    """Answer the grader's requests, one after another, on the unix socket it listens on at
    ``path``, until it sends an empty one or closes the line: one check cell's requests
    (``minidist.course.channel`` runs this as a cell of its own while the check runs)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as line:
        line.connect(path)
        while True:
            text = wire.recv_text(line)
            if not text:
                return
            reply = answer(text)
            try:
                wire.send_text(line, reply)
            except OSError:  # the grader gave up on this request (its deadline passed)
                return
