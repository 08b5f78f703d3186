"""Which library functions answer which lab task, declared where each function is written.

The library is the course's reference implementation, so calling it would
answer a lab. Every function that answers a task, or would do a whole lab's
work for a student, says so with a decorator:

    @lab_answer("lab03_cost")               # the answer to one task
    def ring_cost(p, nbytes, network): ...

    @lab_answer("lab02", "lab03")           # off-limits in every task of Labs 2 and 3
    def ring_allreduce(x, c, ...): ...

An id is a task's grade id (nbgrader's, also its pytest marker) or a lab,
``labNN``, meaning every task of that lab. While task ``lab03_cost`` is
checked, ``minidist.labkit.blocked("lab03_cost")`` blocks every function
registered for ``lab03_cost`` and every one registered for ``lab03``.

The decorator returns the function itself, unchanged: ``blocked`` swaps the
function's code, so every alias of it is reached. The registry lives here,
beneath the library, because the library must not import ``labkit`` (which
imports the library).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from types import FunctionType
from typing import Any, TypeVar

F = TypeVar("F")

# The packages of the library: importing them runs every @lab_answer (a test checks
# that no registered function sits in a module they leave out).
LIBRARY = ("autograd", "nn", "optim", "data", "models", "comm", "parallel", "glove")
ANSWER_ID = re.compile(r"lab\d\d(_[a-z0-9_]+)?")

_answers: dict[str, list[FunctionType]] = {}


def lab_answer(*ids: str) -> Callable[[F], F]:
    """Register the decorated function (or method) as the library's answer to ``ids``."""
    bad = [i for i in ids if not isinstance(i, str) or not ANSWER_ID.fullmatch(i)]
    if not ids or bad:
        raise ValueError(f"lab_answer: give task ids like 'lab03_ring' or labs like 'lab03', "
                         f"got {ids!r}")

    def register(func: F) -> F:
        function: Any = getattr(func, "__func__", func)  # staticmethod, classmethod
        if not isinstance(function, FunctionType):
            raise TypeError(f"lab_answer: {func!r} is not a Python function")
        if function.__code__.co_freevars:  # its code could not be swapped for another
            raise TypeError(f"lab_answer: {dotted_name(function)} cannot be blocked: it is a "
                            "closure, or calls super() (mark a method without either)")
        for answer_id in ids:
            _answers.setdefault(answer_id, []).append(function)
        return func

    return register


def import_library() -> None:
    """Import the library's packages, so that every ``@lab_answer`` has run."""
    for package in LIBRARY:
        importlib.import_module(f"minidist.{package}")


def answers_to(task: str) -> list[FunctionType]:
    """The functions registered for ``task`` and, for a task id, for its whole lab."""
    if not isinstance(task, str) or not ANSWER_ID.fullmatch(task):
        raise ValueError(f"not a task id: {task!r} (like 'lab03_ring', or 'lab03' for a lab)")
    import_library()
    lab = task[:5]
    found = _answers.get(task, []) + (_answers.get(lab, []) if task != lab else [])
    if not found:
        raise LookupError(f"no library function is registered as an answer to {task!r}; "
                          f"registered: {', '.join(sorted(_answers)) or 'none'}")
    return list({id(f): f for f in found}.values())  # once each, in order


def dotted_name(function: FunctionType) -> str:
    """``module.Qual.name`` of a function: how a blocked function is named to a student."""
    return f"{function.__module__}.{function.__qualname__}"
