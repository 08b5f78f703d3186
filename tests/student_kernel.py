"""The two ends of trusted grading in one process, for the grading-integrity tests.

``reached(namespace)``: a student's namespace reached only through a
``Session`` over ``serve.answer`` (the channel the grader uses, without a
kernel); ``verdict(check)``: what a check cell would print, "passed" or its
one sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minidist.labkit import CheckFailed, serve, task
from minidist.labkit.remote import Session


def reached(namespace: dict) -> Callable[[str], Any]:
    """The namespace's objects by name, each call crossing as data."""
    serve.reset()
    return Session(lambda text: serve.answer(text, namespace)).name


def verdict(check: Callable[[], None]) -> str:
    try:
        with task("Task"):
            check()
    except CheckFailed as failure:
        return str(failure)
    return "passed"
