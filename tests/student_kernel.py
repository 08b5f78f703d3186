"""The two ends of trusted grading in one process, for the grading-integrity tests.

``reached(namespace)``: a student's namespace reached only through a
``Session`` over ``serve.answer`` (the channel the grader uses, without a
kernel); ``verdict(check)``: what a check cell would print, "passed" or its
one sentence; ``same_verdict(check, kernel)``: that verdict, asserted equal at
both ends; ``solution_namespace(lab, extra)``: the namespace of a lab's
solution notebook (its setup and answer cells run), with ``extra`` code run after.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from notebook_source import SOLUTIONS

from minidist.labkit import CheckFailed, serve, task
from minidist.labkit.remote import Session


def reached(namespace: dict) -> Callable[[str], Any]:
    """The namespace's objects by name, each call crossing as data."""
    serve.reset()
    return Session(lambda text: serve.answer(text, namespace)).name


def both_ends(namespace: dict) -> tuple[dict, Callable[[str], Any]]:
    """``namespace`` itself, and its objects reached through the grader's channel."""
    return namespace, reached(namespace)


def same_verdict(check: Callable[[Callable[[str], Any]], None],
                 kernel: tuple[dict, Callable[[str], Any]]) -> str:
    """``check(get)``'s verdict on the student's own objects (``get`` takes a name),
    asserted equal to the grader's, which reaches them through the channel."""
    namespace, remote = kernel
    local = verdict(lambda: check(namespace.__getitem__))
    assert local == verdict(lambda: check(remote))
    return local


def verdict(check: Callable[[], None]) -> str:
    try:
        with task("Task"):
            check()
    except CheckFailed as failure:
        return str(failure)
    return "passed"


def solution_namespace(lab: str, extra: str = "") -> dict:
    """The setup and answer cells of ``lab``'s solution notebook, run; then ``extra``
    (a test's wrong answers or forgers)."""
    notebook = json.loads(next((SOLUTIONS / lab).glob("*.ipynb")).read_text())
    namespace: dict = {}
    for cell in notebook["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if cell.get("id") == "setup" or meta.get("solution"):
            exec("".join(cell["source"]), namespace)
    exec(extra, namespace)
    return namespace
