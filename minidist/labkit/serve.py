"""The kernel's side of a graded check: answer the grader's calls with data.

The grader (``minidist.course.trusted``) sends each call as a line of code,
``serve("<request>")``, to the student's kernel. ``serve`` finds the named
object in the notebook's namespace, calls it (or runs a ``labkit`` probe on
it) with the decoded arguments, under the same ``blocked`` targets as the
check, and publishes the reply as display data of type ``REPLY_MIME``: the
result as data (``wire.py``), objects that are not data as handles kept here,
the tensors that changed, or the exception's name and message.

Nothing here is trusted: it runs beside the student's code, which may
replace it. That changes what the kernel replies, which the grader reads as
data and judges itself.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from minidist.labkit import wire
from minidist.labkit.blocking import blocked
from minidist.labkit.mirror import Mirrors, build_context

REPLY_MIME = "application/x-minidist-reply"
ALLOW = frozenset({"$tensor", "$ref", "$class", "$dataset"})
_state: dict[str, Any] = {}


def reset() -> None:
    """Forget the mirrored tensors and kept results (a new check cell begins)."""
    _state.update(mirrors=Mirrors(first_id=-1, step=-1), handles={})


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
    from minidist.data import Dataset

    return Dataset(**_decode(payload))


def _decode(data: Any) -> Any:
    return wire.decode(data, _resolve, ALLOW)


def _refer(value: Any, pending: list) -> dict:
    from minidist.autograd import Tensor

    if isinstance(value, Tensor):
        return _state["mirrors"].refer(value, pending, lambda v: _encode(v, pending), False)
    handles = _state["handles"]
    handles[len(handles)] = value
    return {"$ref": ["handle", len(handles) - 1]}


def _encode(value: Any, pending: list) -> Any:
    return wire.encode(value, lambda v: _refer(v, pending))


def answer(text: str, namespace: dict | None = None) -> str:
    """The reply to one request, as JSON text; names are looked up in ``namespace``
    (default: the notebook's)."""
    if "mirrors" not in _state:
        reset()
    _state["namespace"] = _namespace() if namespace is None else namespace
    pending: list = []
    try:
        request = wire.loads(text)
        if request.get("op") == "reset":
            reset()
            return json.dumps({"value": None})
        mirrors = _state["mirrors"]
        mirrors.apply(request.get("tensors", []), _decode, lambda f: build_context(f, _decode))
        target = _follow(request.get("path"))
        args, kwargs = _decode(request.get("args")), _decode(request.get("kwargs"))
        with blocked(*[str(t) for t in request.get("blocked", [])]):
            if request.get("op") == "probe":
                result = _import(request.get("probe"))(target, *args, **kwargs)
            else:
                result = target(*args, **kwargs)
        reply = {"value": _encode(result, pending)}
    except BaseException as error:  # noqa: BLE001 (an interrupt too: the grader stopped a call)
        reply = {"error": [type(error).__name__, str(error)[:2000]]}
    try:
        reply["tensors"] = pending + _state["mirrors"].changed()
    except Exception as error:  # a tensor the student's code made unreadable
        reply = {"error": [type(error).__name__, str(error)[:2000]]}
    return json.dumps(reply)


def serve(text: str) -> None:
    """Answer one request: publish the reply where the grader reads it."""
    from IPython.display import publish_display_data

    publish_display_data({REPLY_MIME: answer(text)})
