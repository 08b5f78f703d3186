"""What crosses between the grader and a student's kernel: data, never code.

When a lab is graded, its checks run in the grader's own process and call
the student's functions in the notebook's kernel (``remote.py``). Every value
that crosses is written here as JSON; what JSON cannot say is a one-key
object whose key starts with ``$``::

    {"$array": "<base64 .npy>"}     np.load(..., allow_pickle=False): no object arrays
    {"$scalar": "<base64 .npy>"}    a NumPy scalar (a 0-d array, read back as its item type)
    {"$tuple": [...]}  {"$dict": [[key, value], ...]}  {"$slice": [start, stop, step]}
    {"$ellipsis": 0}   {"$dtype": "float64"}  {"$dataset": {"x": ..., "y": ..., ...}}
    {"$tensor": id}    a tensor mirrored on both sides     (remote.py, mirror.py)
    {"$ref": [...]}    an object that stays in the kernel: a name path or a handle
    {"$class": "minidist.autograd.ops.Mul"}   a library class (grader to kernel only)
    {"$view": [k, same, offset, shape, strides, dtype]}   the k-th array of the request, or
                       a view of it (kernel to grader only: ``view_of``)
    {"$step": [stage, micro, "F"]}  a pipeline's Step (Lab 7's schedules are lists of them)
    {"$comm": [n, rank, size, modelled]}  {"$request": n}  {"$worker": n}  {"$average": n}
                       a communicator, request, parameter server's worker or Lab 4's
                       gradient averager the grader lends to the student's code
                       (``relay.py``)

Reading never runs code: JSON, then ``np.load`` without pickle, then only the
markers above, each to a plain value; a marker the reader does not accept
(``allow``) is an error, as are oversized messages and nesting deeper than
``MAX_DEPTH``. Pickle is never used, in either direction.

Arrays keep their identity across a call: both ends number the arrays of a
request in the order they are written (``on_array``), the reply sends back
those the student's code changed in place, and a result that is one of
them, or a view of one, comes back as ``$view`` (:func:`view_of`), so that
``result is x``, ``np.shares_memory`` and in-place updates mean in the
grader what they meant in the kernel.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

MAX_MESSAGE_CHARS = 64 << 20  # a message larger than this is refused unread
MAX_DEPTH = 64
LENGTH = struct.Struct("<Q")  # before each message on a line: its length in bytes
ARRAY_KINDS = "biufc"  # bool, integers, floats, complex: nothing that holds objects


class WireError(ValueError):
    """A message that is not data of the accepted kinds."""


def _npy(array: np.ndarray) -> str:
    if array.dtype.kind not in ARRAY_KINDS:
        raise WireError(f"an array of dtype {array.dtype} cannot be sent (numbers only)")
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _from_npy(text: Any) -> np.ndarray:
    if not isinstance(text, str):
        raise WireError("an array must be base64 text")
    array = np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False)
    if array.dtype.kind not in ARRAY_KINDS:
        raise WireError(f"an array of dtype {array.dtype} was refused")
    return np.array(array)  # writable, owning its memory, a 0-d array an ordinary one


def encode(value: Any, refer: Callable[[Any], dict | None], depth: int = 0,
           on_array: Callable[[np.ndarray], dict | None] | None = None) -> Any:
    """``value`` as JSON-ready data; ``refer(obj)`` answers for tensors and other objects
    (a ``$tensor`` or ``$ref`` marker), or None when ``obj`` cannot be sent;
    ``on_array(array)`` sees every array in order and may answer a marker instead."""
    if depth > MAX_DEPTH:
        raise WireError(f"values nested deeper than {MAX_DEPTH} cannot be sent")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (bool, int, float, str)):  # a subclass: only its plain value
        return (bool if isinstance(value, bool) else int if isinstance(value, int)
                else float if isinstance(value, float) else str)(value)
    if isinstance(value, np.ndarray):
        marker = on_array(value) if on_array is not None else None
        return marker if marker is not None else {"$array": _npy(np.asarray(value))}
    if isinstance(value, np.generic):
        return {"$scalar": _npy(np.asarray(value))}
    if isinstance(value, np.dtype):
        return {"$dtype": value.str}
    if isinstance(value, (list, tuple)):
        items = [encode(v, refer, depth + 1, on_array) for v in value]
        return items if isinstance(value, list) else {"$tuple": items}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$dict": [[k, encode(v, refer, depth + 1, on_array)] for k, v in value.items()]}
    if isinstance(value, slice):
        return {"$slice": [encode(getattr(value, a), refer, depth + 1)
                           for a in ("start", "stop", "step")]}
    if value is Ellipsis:
        return {"$ellipsis": 0}
    marker = refer(value)
    if marker is None:
        raise WireError(f"a {type(value).__name__} cannot be sent to or from the notebook")
    return marker


def decode(data: Any, resolve: Callable[[str, Any], Any], allow: frozenset[str],
           depth: int = 0, arrays: list[np.ndarray] | None = None) -> Any:
    """The value ``data`` (from ``json.loads``) stands for; ``resolve(kind, payload)``
    answers the markers in ``allow`` that are not plain data (``$tensor``, ``$ref``, ...);
    every array read is appended to ``arrays``, in order."""
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH} was refused")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, resolve, allow, depth + 1, arrays) for v in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise WireError("a value must be JSON data or a one-key marker")
    (kind, payload), = data.items()
    if kind == "$array":
        array = _from_npy(payload)
        if arrays is not None:
            arrays.append(array)
        return array
    if kind == "$scalar":
        return _from_npy(payload)[()]
    if kind == "$dtype":
        return np.dtype(str(payload))
    if kind == "$tuple" and isinstance(payload, list):
        return tuple(decode(v, resolve, allow, depth + 1, arrays) for v in payload)
    if kind == "$dict" and isinstance(payload, list):
        return {str(k): decode(v, resolve, allow, depth + 1, arrays) for k, v in payload}
    if kind == "$slice" and isinstance(payload, list) and len(payload) == 3:
        return slice(*(decode(v, resolve, allow, depth + 1) for v in payload))
    if kind == "$ellipsis":
        return Ellipsis
    if kind in allow:
        return resolve(kind, payload)
    raise WireError(f"a {kind!r} value was refused here")


def step_marker(value: Any) -> dict | None:
    """The ``$step`` marker of a pipeline ``Step`` (its fields, as data), else None."""
    from minidist.parallel.pipeline import Step

    if not isinstance(value, Step):
        return None
    return {"$step": encode([value.stage, value.micro, value.phase], lambda _: None)}


def rebuilt_step(payload: Any) -> Any:
    """The ``Step`` a ``$step`` marker names (a frozen dataclass: building it runs no
    code of the sender's)."""
    from minidist.parallel.pipeline import Step

    fields = decode(payload, lambda *_: None, frozenset())
    if not (isinstance(fields, list) and len(fields) == 3):
        raise WireError("a $step must hold stage, micro and phase")
    return Step(*fields)


def loads(text: Any) -> dict:
    """A message (a JSON object) from text, refusing anything oversized or not an object."""
    if not isinstance(text, str) or len(text) > MAX_MESSAGE_CHARS:
        raise WireError("a message must be JSON text of at most "
                        f"{MAX_MESSAGE_CHARS >> 20} M characters")
    message = json.loads(text)
    if not isinstance(message, dict):
        raise WireError("a message must be a JSON object")
    return message


def view_of(value: np.ndarray, arrays: list[np.ndarray]) -> dict | None:
    """The ``$view`` marker of ``value`` if it is one of ``arrays`` (the request's, as
    read) or a view into one; None otherwise."""
    for k, array in enumerate(arrays):
        if value is array:
            return {"$view": [k, True, 0, list(array.shape), list(array.strides), array.dtype.str]}
        if value.size and np.may_share_memory(value, array):  # bounds: exact for a block
            offset = (value.__array_interface__["data"][0]
                      - array.__array_interface__["data"][0])
            return {"$view": [k, False, offset, list(value.shape), list(value.strides),
                              value.dtype.str]}
    return None


def rebuilt_view(payload: Any, arrays: list[np.ndarray]) -> np.ndarray:
    """The array a ``$view`` marker names: one of ``arrays`` (this side's arrays of the
    request), or a view into it with the kernel's offset, shape, strides and dtype."""
    if not (isinstance(payload, list) and len(payload) == 6 and isinstance(payload[0], int)
            and 0 <= payload[0] < len(arrays)):
        raise WireError("a $view must name an array of the request")
    k, same, offset, shape, strides, dtype = payload
    array = arrays[k]
    if same:
        return array
    try:
        return np.ndarray(tuple(shape), np.dtype(str(dtype)), buffer=array, offset=int(offset),
                          strides=tuple(strides))
    except (TypeError, ValueError) as error:
        raise WireError(f"a $view outside its array was refused ({error})") from None


# --- the line: one message after another on a stream socket --------------------------------
def send_text(line: socket.socket, text: str) -> None:
    """``text`` as one message on ``line``: its length in bytes, then its UTF-8 bytes."""
    data = text.encode()
    line.sendall(LENGTH.pack(len(data)) + data)


def recv_text(line: socket.socket) -> str | None:
    """The next message on ``line``; None once the other end has closed it."""
    head = _recv_exactly(line, LENGTH.size)
    if head is None:
        return None
    (size,) = LENGTH.unpack(head)
    if size > MAX_MESSAGE_CHARS * 4:
        raise WireError(f"a message of {size} bytes is too large")
    data = _recv_exactly(line, size)
    return None if data is None else data.decode()


def _recv_exactly(line: socket.socket, size: int) -> bytes | None:
    buffer, got = bytearray(size), 0
    view = memoryview(buffer)
    while got < size:
        n = line.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return bytes(buffer)

