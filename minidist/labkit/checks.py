"""Checks that fail with one sentence saying exactly what is wrong.

A bare ``assert np.allclose(got, expected)`` tells a student nothing. These
helpers compare and, on failure, raise ``CheckFailed`` whose message names
the quantity, the first wrong position and both values::

    log_softmax backward: input 0 gradient differs at [0, 2]: got 0.31, expected 0.12

``check_backward`` compares a Function's backward rule with central finite
differences of its own forward, in float64; it calls ``forward``/``backward``
directly, so it needs no other part of the autograd engine (each task is
checkable alone). ``task`` wraps a group of checks: it prints one line when
they all pass and turns any failure, or any exception raised by the student's
code, into one sentence that starts with the task's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


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
        raise CheckFailed(f"{what}: differs{where}: got {got[index]:.6g}, "
                          f"expected {expected[index]:.6g} ({int(wrong.sum())} of "
                          f"{wrong.size} values wrong)")


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


def check_backward(fn: type, *inputs: np.ndarray, what: str, seed: int = 0,
                   **options: Any) -> None:
    """Compare ``fn.backward`` with finite differences of ``fn.forward`` on ``inputs``.

    The loss is sum(forward(inputs) * w) for a fixed random ``w``, so every
    output element's gradient is checked. Cost: 2 forwards per input element.
    """
    __tracebackhide__ = True
    from minidist.autograd import Context, Tensor

    arrays = [np.array(x, dtype=np.float64) for x in inputs]

    def forward(*xs: np.ndarray) -> np.ndarray:
        ctx = Context(fn, tuple(Tensor(x, requires_grad=True) for x in xs))
        return np.asarray(fn.forward(ctx, *xs, **options))

    weights = np.random.default_rng(seed).standard_normal(forward(*arrays).shape)
    ctx = Context(fn, tuple(Tensor(x.copy(), requires_grad=True) for x in arrays))
    fn.forward(ctx, *[x.copy() for x in arrays], **options)
    grads = fn.backward(ctx, weights.copy())
    if not isinstance(grads, tuple):
        grads = (grads,)
    expect(len(grads) == len(arrays),
           f"{what}: backward returned {len(grads)} gradients for {len(arrays)} inputs")
    for i, grad in enumerate(grads):
        expected = numerical_gradient(lambda *xs: float((forward(*xs) * weights).sum()),
                                      arrays, i)
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
    except Exception as error:  # the student's code raised: say what, in one sentence
        raise CheckFailed(f"{name}: your code raised {type(error).__name__}: {error}") from None
    print(f"{name}: all checks passed.")
