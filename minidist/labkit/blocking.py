"""``blocked``: switch off a library function while a student's answer is checked.

The library is the course's reference implementation, so "call the library"
would answer every lab. While a task is graded, its reference is replaced by
a function that raises ``BlockedError("write your own ...")``.

The replacement swaps the function's *code object* (``__code__``) rather than
the name that points at it. A student who wrote
``from minidist.autograd.ops import unbroadcast as mine`` before the check
holds the same function object, so the swap reaches that alias too, and so it
does every caller inside the library. Everything is restored on exit, even
when the check fails.

Limits: code copied out of the library (``inspect.getsource`` and ``exec``)
is a new function and is not blocked; that is plagiarism, not a bug to patch.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import FunctionType
from typing import Any


class BlockedError(NotImplementedError):
    """Raised by a library function that is blocked while a task is graded."""


def _resolve(target: str) -> Any:
    """Import ``a.b.c.Name.attr``: the longest importable module prefix, then attributes."""
    parts = target.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"cannot import {target!r}")


def _raising_code(target: str, like: FunctionType) -> Any:
    """A code object with no free variables that raises BlockedError naming ``target``."""
    owner, name = target.split(".")[-2:]
    short = f"{owner}.{name}" if owner[:1].isupper() else name
    message = f"write your own {short}: the library's version is blocked while this is checked"
    module = f"__import__({__name__!r}, fromlist=['_'])"
    namespace: dict[str, Any] = {}
    exec(f"def {like.__name__}(*args, **kwargs):\n"
         f"    raise {module}.BlockedError({message!r})\n", namespace)
    return namespace[like.__name__].__code__


def _function_of(obj: Any, target: str) -> FunctionType:
    func = getattr(obj, "__func__", obj)  # staticmethod / classmethod / bound method
    if not isinstance(func, FunctionType):
        raise TypeError(f"blocked({target!r}): not a Python function")
    if func.__code__.co_freevars:
        raise TypeError(f"blocked({target!r}): closures cannot be blocked")
    return func


@contextmanager
def blocked(*targets: str) -> Iterator[None]:
    """Make each dotted ``target`` raise ``BlockedError`` inside the ``with`` block."""
    functions = [_function_of(_resolve(t), t) for t in targets]
    originals = [f.__code__ for f in functions]
    try:
        for target, func in zip(targets, functions, strict=True):
            func.__code__ = _raising_code(target, func)
        yield
    finally:
        for func, code in reversed(list(zip(functions, originals, strict=True))):
            func.__code__ = code
