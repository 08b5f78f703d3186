"""``blocked``: switch off a library function while a student's answer is checked.

The library is the course's reference implementation, so "call the library"
would answer every lab. While a task is graded, its reference is replaced by
a function that raises ``BlockedError("write your own ...")``.

What to block is named by the task's id: ``blocked("lab03_cost")`` blocks
every library function marked ``@lab_answer("lab03_cost")`` or
``@lab_answer("lab03")`` where it is written (:mod:`minidist.util.answers`),
so no list of names is kept by hand. A dotted path blocks one function:
``blocked("minidist.autograd.ops.Mul.backward")``.

The replacement swaps the function's *code object* (``__code__``) rather than
the name that points at it. A student who wrote
``from minidist.autograd.ops import unbroadcast as mine`` before the check
holds the same function object, so the swap reaches that alias too, and so it
does every caller inside the library. Everything is restored on exit, even
when the check fails.

What a target names is found once and kept (a dotted path imports modules; a
check may block the same targets at every step of a multi-rank run), and
so is the raising code of each function.

Limits: code copied out of the library (``inspect.getsource`` and ``exec``)
is a new function and is not blocked; that is plagiarism, not a bug to patch.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FunctionType
from typing import Any

from minidist.util.answers import ANSWER_ID, answers_to, dotted_name


class BlockedError(NotImplementedError):
    """Raised by a library function that is blocked while a task is graded."""


_active: list[str] = []  # targets blocked now, oldest first: calls into the kernel carry them
_found: dict[str, list[tuple[str, FunctionType]]] = {}  # target -> its functions
_raising: dict[tuple[str, str], CodeType] = {}  # (dotted name, function name) -> code


def active_blocks() -> list[str]:
    """The targets of every ``blocked`` block open now (a check's calls into the student's
    kernel block the same there)."""
    return list(_active)


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


def _raising_code(target: str, like: FunctionType) -> CodeType:
    """A code object with no free variables that raises BlockedError naming ``target``."""
    key = (target, like.__name__)
    if key not in _raising:
        _raising[key] = _new_raising_code(target, like)
    return _raising[key]


def _new_raising_code(target: str, like: FunctionType) -> CodeType:
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


def _functions(target: str) -> list[tuple[str, FunctionType]]:
    """``(name, function)`` for a dotted path, or for each answer to a task id."""
    if target not in _found:
        if ANSWER_ID.fullmatch(target):  # lab_answer took only functions it can block
            _found[target] = [(dotted_name(f), f) for f in answers_to(target)]
        else:
            _found[target] = [(target, _function_of(_resolve(target), target))]
    return _found[target]


@contextmanager
def blocked(*targets: str) -> Iterator[None]:
    """Make each target raise ``BlockedError`` inside the ``with`` block: every library
    answer to a task id (``"lab03_ring"``, ``"lab03"``), or one dotted function path."""
    found = {id(f): (name, f) for target in targets for name, f in _functions(target)}
    functions = list(found.values())
    originals = [f.__code__ for _, f in functions]
    _active.extend(targets)
    try:
        for name, func in functions:
            func.__code__ = _raising_code(name, func)
        yield
    finally:
        del _active[len(_active) - len(targets):]
        for (_, func), code in reversed(list(zip(functions, originals, strict=True))):
            func.__code__ = code
