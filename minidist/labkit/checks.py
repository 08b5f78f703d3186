"""Checks that fail with one sentence saying exactly what is wrong.

A bare ``assert np.allclose(got, expected)`` tells a student nothing. These
helpers compare and, on failure, raise ``CheckFailed`` whose message names
the quantity, the first wrong position and both values::

    log_softmax backward: input 0 gradient differs at [0, 2]: got 0.31, expected 0.12

``check_backward`` compares a Function's backward rule with central finite
differences of its own forward, in float64; it calls ``forward``/``backward``
directly (through two probes, ``remote.on_student``, so the class may live in
a graded kernel), so it needs no other part of the autograd engine (each task
is checkable alone). ``task`` wraps a group of checks: it prints one line when
they all pass and turns any failure, or any exception raised by the student's
code, into one sentence that starts with the task's name. An exception raised
by a check's own code (``labkit``'s, reading what the answer returned: a None
where a tuple was due) is said to be that, not an error of the student's code.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from minidist.labkit.remote import name_of, on_student


class CheckFailed(AssertionError):
    """A check found a wrong answer; the message is one sentence for the student."""


def expect(condition: bool, sentence: str) -> None:
    """Fail with ``sentence`` unless ``condition`` holds."""
    __tracebackhide__ = True
    if not condition:
        raise CheckFailed(sentence)


def expect_close(what: str, got: Any, expected: Any, rtol: float = 1e-5,
                 atol: float = 1e-7) -> None:
    """Fail unless ``got`` has the shape of ``expected`` and equals it within tolerances."""
    __tracebackhide__ = True
    expected = np.asarray(expected)
    if got is None:
        raise CheckFailed(f"{what}: got None, expected an array of shape {expected.shape}")
    got = np.asarray(getattr(got, "data", got))
    if got.shape != expected.shape:
        raise CheckFailed(f"{what}: got shape {got.shape}, expected {expected.shape}")
    wrong = ~np.isclose(got, expected, rtol=rtol, atol=atol)
    if wrong.any():
        index = tuple(int(i) for i in np.argwhere(wrong)[0])
        where = f" at {list(index)}" if index else ""
        mine, theirs = _told_apart(got[index], expected[index])
        dtypes = f"; your values are {got.dtype}, the expected {expected.dtype}" \
            if got.dtype != expected.dtype else ""
        raise CheckFailed(f"{what}: differs{where}: got {mine}, expected {theirs} "
                          f"({int(wrong.sum())} of {wrong.size} values wrong{dtypes})")


def _told_apart(got: Any, expected: Any) -> tuple[str, str]:
    """Both numbers with 6 significant digits, or as many more as it takes for them to
    differ on the page (a float32 answer checked at rtol 1e-10 once read "got 1.14781,
    expected 1.14781")."""
    for digits in range(6, 18):
        shown = f"{got:.{digits}g}", f"{expected:.{digits}g}"
        if shown[0] != shown[1]:
            break
    return shown


def numerical_gradient(f: Callable[..., float], arrays: list[np.ndarray], which: int,
                       eps: float = 1e-6) -> np.ndarray:
    """d f(*arrays) / d arrays[which] by central differences (float64).

    Cost: 2 evaluations of ``f`` per element of ``arrays[which]``.
    """
    x = arrays[which]
    grad = np.zeros_like(x, dtype=np.float64)
    for index in np.ndindex(x.shape):
        saved = x[index]
        x[index] = saved + eps
        up = f(*arrays)
        x[index] = saved - eps
        down = f(*arrays)
        x[index] = saved
        grad[index] = (up - down) / (2 * eps)
    return grad


def forward_values(fn: type, points: list[tuple[np.ndarray, ...]],
                   options: dict[str, Any]) -> list[np.ndarray]:
    """Probe: ``fn.forward`` at each point (a tuple of input arrays), a fresh context each."""
    from minidist.autograd import Context, Tensor

    outputs = []
    for xs in points:
        ctx = Context(fn, tuple(Tensor(x.copy(), requires_grad=True) for x in xs))
        outputs.append(np.asarray(fn.forward(ctx, *[x.copy() for x in xs], **options)))
    return outputs


def backward_values(fn: type, arrays: list[np.ndarray], grad: np.ndarray | None,
                    options: dict[str, Any]) -> tuple[Any, ...]:
    """Probe: what ``fn.backward`` returns for upstream ``grad`` (default ones) after
    ``fn.forward`` at ``arrays``, as a tuple."""
    from minidist.autograd import Context, Tensor

    ctx = Context(fn, tuple(Tensor(x.copy(), requires_grad=True) for x in arrays))
    out = fn.forward(ctx, *[x.copy() for x in arrays], **options)
    grads = fn.backward(ctx, np.ones_like(out) if grad is None else grad.copy())
    return grads if isinstance(grads, tuple) else (grads,)


def expect_same_operation(fn: type, arrays: list[np.ndarray], output: Any, what: str,
                          options: dict[str, Any]) -> None:
    """``output`` (``fn.forward`` at ``arrays``) is what the library's operation of the same
    name computes there, computed here; a class of another name is not compared."""
    __tracebackhide__ = True
    from minidist import autograd

    library = getattr(autograd, name_of(fn), None)
    if not (isinstance(library, type) and issubclass(library, autograd.Function)) \
            or library is fn:
        return
    (expected,) = forward_values(library, [tuple(arrays)], options)
    expect_close(f"{what}: forward's output (the forward computes {library.__name__}: keep "
                 "it as given)", output, expected, rtol=1e-12, atol=1e-12)


def check_backward(fn: type, *inputs: np.ndarray, what: str, seed: int = 0,
                   **options: Any) -> None:
    """Compare ``fn.backward`` with finite differences of ``fn.forward`` on ``inputs``.

    The loss is sum(forward(inputs) * w) for a fixed random ``w``, so every
    output element's gradient is checked. ``fn`` runs through two probes
    (``on_student``), so the student's class may live in a graded kernel.
    A class named as one of ``minidist.autograd``'s operations must first
    compute what it does (a forward returning a constant, with a backward of
    zeros, agreed with its own finite differences and passed).
    Cost: 2 forwards per input element, in one call.
    """
    __tracebackhide__ = True
    arrays = [np.array(x, dtype=np.float64) for x in inputs]
    (output,) = on_student(forward_values, fn, [tuple(arrays)], options)
    expect_same_operation(fn, arrays, output, what, options)
    weights = np.random.default_rng(seed).standard_normal(np.shape(output))
    eps, points = 1e-6, []
    for i, x in enumerate(arrays):
        for index in np.ndindex(x.shape):
            for sign in (1, -1):
                moved = [a.copy() for a in arrays]
                moved[i][index] += sign * eps
                points.append(tuple(moved))
    values = [float((np.asarray(out) * weights).sum())
              for out in on_student(forward_values, fn, points, options)]
    grads = on_student(backward_values, fn, arrays, weights, options)
    expect(len(grads) == len(arrays),
           f"{what}: backward returned {len(grads)} gradients for {len(arrays)} inputs")
    start = 0
    for i, (x, grad) in enumerate(zip(arrays, grads, strict=True)):
        pairs = np.array(values[start:start + 2 * x.size]).reshape(-1, 2)
        start += 2 * x.size
        expected = ((pairs[:, 0] - pairs[:, 1]) / (2 * eps)).reshape(x.shape)
        expect_close(f"{what}: input {i} gradient", grad, expected, rtol=1e-4, atol=1e-6)


@contextmanager
def task(name: str) -> Iterator[None]:
    """Run a task's checks: print one line if they pass, fail with one sentence if not."""
    __tracebackhide__ = True
    try:
        yield
    except CheckFailed as failure:  # the same "Task N: ..." prefix as the line printed on a pass
        raise CheckFailed(f"{name}: {failure}") from None
    except NotImplementedError as error:
        if type(error).__name__ == "BlockedError":
            raise CheckFailed(f"{name}: {error}") from None
        raise CheckFailed(f"{name}: not done yet ({type(error).__name__}: {error})") from None
    except Exception as error:  # say what was raised, and whose code raised it
        if raised_by_the_check(error):
            raise CheckFailed(f"{name}: what your code returned could not be checked "
                              f"({type(error).__name__}: {error}); compare it with what "
                              "the task says the answer returns") from None
        raise CheckFailed(f"{name}: your code raised {type(error).__name__}: {error}") from None
    print(f"{name}: all checks passed.")


LABKIT = Path(__file__).resolve().parent


def raised_by_the_check(error: BaseException) -> bool:
    """True when ``error`` rose in a ``labkit`` check with no frame of other code below it
    (numpy's and Python's aside): the check's own reading of what an answer returned
    failed. A frame of the student's code (or of the library it called) below the check
    makes it the student's, even when labkit code the student called raised it; so does
    an exception the grader rebuilt from the kernel's."""
    if getattr(error, "raised_by_student", False):
        return False
    outside = (sys.base_prefix, sys.prefix, "<frozen")
    frames = [frame.f_code.co_filename for frame, _ in traceback.walk_tb(error.__traceback__)]
    in_labkit = [Path(f).resolve().parent == LABKIT for f in frames
                 if not f.startswith(outside) and "site-packages" not in f]
    cell = in_labkit.index(False) if False in in_labkit else len(in_labkit)  # below task()
    below = in_labkit[cell:]
    return True in below and all(below[below.index(True):])
