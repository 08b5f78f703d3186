"""What a relayed call carries across the line, in the kernel: buffers and errors.

The student's code holds a ``RelayedCommunicator`` (``relayed.py``); each of its
operations tells the grader only what the grader needs of a buffer (``sent``: the
values of one sent; ``space``: the shape of one received into), and puts the
grader's answer back (``fill``: the data received; ``rebuilt_error``: the error
the grader's rank raised, raised again in the student's code).
"""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from minidist.comm import errors
from minidist.labkit import wire


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


def fill(buf: np.ndarray, data: Any, upto: bool = False) -> None:
    """Copy what the grader received into the student's buffer (``upto``: into its first
    items, for an ``irecv_upto``)."""
    if upto and isinstance(data, np.ndarray) and data.ndim == 1 and data.size <= buf.size:
        buf.reshape(-1)[:data.size] = data
    elif isinstance(data, np.ndarray) and data.shape == buf.shape:
        buf[...] = data
    else:
        raise wire.WireError("the grader's answer does not fit the receive buffer")
