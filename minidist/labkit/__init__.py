"""Helpers that lab notebooks import: checks that speak in sentences, and ``blocked``.

A lab cell checks a student's answer like this::

    from minidist.labkit import blocked, check_backward, task

    with task("Task 2: Mul backward"), blocked("lab01_backward_mul"):
        check_backward(Mul, a, b, what="Mul backward, b broadcast along rows")

``task`` prints one line when every check inside passed and turns any failure
into one sentence (``CheckFailed``) that says exactly what is wrong.
``blocked`` switches off the library's own answer to the task for the
duration of the check, so an answer that only calls the library scores zero:
given the task's id, it blocks every library function marked
``@lab_answer("lab01_backward_mul")`` (or ``"lab01"``) where it is written;
given a dotted path, that one function.
The same checks run in the test suite on the library's reference code, under
the task's pytest marker (``pytest -m lab01_backward_mul``).
"""

from minidist.labkit.blocking import BlockedError, blocked
from minidist.labkit.checks import (
    CheckFailed,
    check_backward,
    expect,
    expect_close,
    numerical_gradient,
    task,
)

__all__ = [
    "BlockedError", "CheckFailed", "blocked", "check_backward", "expect", "expect_close",
    "numerical_gradient", "task",
]
