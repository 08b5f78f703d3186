"""Checks for Lab 1 (autograd and optimisers) that need more than one comparison.

Each takes the function or class under test, so the notebook passes the
student's and the test suite passes the library's (``pytest -m lab01_adam``).
Expected values never come from the code under test: graph properties are
checked directly, gradients against finite differences, optimiser steps
against a reference trajectory computed before the check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.labkit.blocking import blocked
from minidist.labkit.checks import (
    CheckFailed,
    backward_values,
    expect,
    expect_close,
    numerical_gradient,
)
from minidist.labkit.remote import on_student


def graph_nodes(root: Any) -> list[Any]:
    """Every tensor that ``root`` was computed from (through recorded ops), in no order."""
    seen: dict[int, Any] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(node._ctx.parents if node._ctx is not None else [])
    return list(seen.values())


def check_unbroadcast(unbroadcast_fn: Callable[[np.ndarray, tuple], np.ndarray],
                      grad: np.ndarray, cases: dict[tuple[int, ...], np.ndarray],
                      what: str) -> None:
    """``unbroadcast_fn(grad, shape)`` equals ``cases[shape]`` for every shape, and leaves
    ``grad`` as it was: the same gradient often goes on to another input (Add hands it to
    both), so an answer that sums into it, or clears it, breaks the next one. The
    expected values are copied before the first call: an answer cannot change them."""
    __tracebackhide__ = True
    before = np.array(grad, copy=True)
    expected = {shape: np.array(value, copy=True) for shape, value in cases.items()}
    for shape, value in expected.items():
        expect_close(f"{what} to {shape}", unbroadcast_fn(grad, shape), value)
        expect(np.array_equal(grad, before), f"{what} to {shape} changed its input grad: "
               "return a new array and leave grad as it was (Add hands the same gradient "
               "to both of its inputs)")


def check_topological_order(order_fn: Callable[[Any], list[Any]], root: Any, what: str) -> None:
    """``order_fn(root)``: every node once, each after all of its inputs, ``root`` last."""
    __tracebackhide__ = True
    order = list(order_fn(root))
    position = {id(node): i for i, node in enumerate(order)}
    expect(len(position) == len(order), f"{what}: a tensor appears more than once")
    nodes = graph_nodes(root)
    missing = [n for n in nodes if id(n) not in position]
    expect(not missing, f"{what}: {len(missing)} of the {len(nodes)} tensors are missing")
    expect(len(order) == len(nodes), f"{what}: {len(order)} entries, but the graph has "
           f"{len(nodes)} tensors")
    expect(order[-1] is root, f"{what}: the root (the output) must come last")
    for node in order:
        for parent in node._ctx.parents if node._ctx is not None else []:
            expect(position[id(parent)] < position[id(node)],
                   f"{what}: the output of {node._ctx.fn.__name__} at position "
                   f"{position[id(node)]} comes before its input at {position[id(parent)]}")


def backward_of(fn: type, *arrays: np.ndarray, grad: np.ndarray | None = None,
                **options: Any) -> tuple[Any, ...]:
    """The gradients ``fn.backward`` returns at ``arrays`` for upstream ``grad`` (default
    ones), as a tuple: for checks at points where finite differences do not apply."""
    arrays = tuple(np.array(a, dtype=np.float64) for a in arrays)
    upstream = None if grad is None else np.array(grad, np.float64)
    return tuple(on_student(backward_values, fn, arrays, upstream, options))


def check_backward_pass(backward_fn: Callable[[Any], None], build: Callable[..., Any],
                        arrays: list[np.ndarray], what: str,
                        frozen: tuple[np.ndarray, ...] = ()) -> None:
    """``backward_fn(build(*leaves, *frozen))`` must leave d output / d leaf in ``leaf.grad``.

    Called twice, on two graphs: the first call finds every ``.grad`` None
    (it must set it), the second finds the first's gradient (it must add to
    it). ``frozen`` arrays enter as tensors that need no gradient: their
    ``.grad`` must stay None. Expected: finite differences of ``build``'s value.
    """
    __tracebackhide__ = True
    from minidist.autograd import Tensor, no_grad

    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    leaves = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    constants = [Tensor(np.array(c, dtype=np.float64)) for c in frozen]

    def value(*xs: np.ndarray) -> float:
        with no_grad():
            return float(build(*[Tensor(x) for x in xs], *constants).data)

    expected = [numerical_gradient(value, arrays, i) for i in range(len(arrays))]
    for times, state in ((1, "started as None: set it"), (2, "already held a gradient: add to it")):
        backward_fn(build(*leaves, *constants))
        for i, leaf in enumerate(leaves):
            try:
                expect_close(f"{what}: gradient of input {i} (its .grad {state})", leaf.grad,
                             times * expected[i], rtol=1e-4, atol=1e-6)
            except CheckFailed as failure:
                raise CheckFailed(f"{failure}{_shared_hint(leaves)}") from None
        for constant in constants:
            expect(constant.grad is None, f"{what}: a tensor that needs no gradient got a "
                   ".grad; skip the inputs that are not tensors requiring a gradient")


def _shared_hint(leaves: list[Any]) -> str:
    """Why a second backward went wrong when two leaves hold one gradient array: Add
    hands its upstream gradient to both inputs, and adding in place to one adds to both."""
    arrays = [getattr(leaf, "grad", None) for leaf in leaves]
    for i, a in enumerate(arrays):
        for j in range(i + 1, len(arrays)):
            if isinstance(a, np.ndarray) and isinstance(arrays[j], np.ndarray) \
                    and np.shares_memory(a, arrays[j]):
                return (f" -- inputs {i} and {j} hold one .grad array (one operation handed "
                        "both the same gradient), so adding in place to one added to both: "
                        "store a copy of a leaf's first gradient")
    return ""


def check_optimizer(make: Callable[[list[Any]], Any], make_reference: Callable[[list[Any]], Any],
                    what: str, block: tuple[str, ...] = (), steps: int = 4,
                    seed: int = 0) -> None:
    """Run ``make(params)`` and ``make_reference(params)`` on the same gradients; compare.

    Two parameters of different shapes, ``steps`` steps with fresh random
    gradients; a third gets one in the first half of the steps and ``None`` after, when
    it must not move (its momentum or moments must not move it either: "treat None as
    a zero gradient" passed when it never had one; a count of steps kept per optimiser
    or per parameter agrees on it).
    Every step must update each ``p.data`` in place (the same array).
    The reference runs first; then ``make`` runs with the ``block`` targets blocked.
    """
    __tracebackhide__ = True
    from minidist.autograd import Tensor

    rng = np.random.default_rng(seed)
    shapes = [(3, 4), (5,), (2,)]
    start = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) for s in shapes[:2]]
             + [rng.standard_normal(shapes[2]) if step < (steps + 1) // 2 else None]
             for step in range(steps)]

    def trajectory(factory: Callable[[list[Any]], Any]) -> list[list[np.ndarray]]:
        params = [Tensor(x.copy(), requires_grad=True) for x in start]
        arrays = [p.data for p in params]
        optimizer = factory(params)
        states = []
        for step, step_grads in enumerate(grads):
            for p, g in zip(params, step_grads, strict=True):
                p.grad = None if g is None else g.copy()
            optimizer.step()
            for i, (p, array) in enumerate(zip(params, arrays, strict=True)):
                expect(p.data is array, f"{what}: step {step + 1} replaced parameter {i}'s "
                       "p.data by a new array; update it in place (p.data -= ...)")
            states.append([p.data.copy() for p in params])
        return states

    expected = trajectory(make_reference)
    with blocked(*block):
        got = trajectory(make)
    for step, (got_step, expected_step) in enumerate(zip(got, expected, strict=True)):
        for i, (g, e) in enumerate(zip(got_step, expected_step, strict=True)):
            idle = " (its p.grad was None at this step: it must not move)" \
                if grads[step][i] is None else ""
            expect_close(f"{what}: parameter {i} after step {step + 1}{idle}", g, e, rtol=1e-6,
                         atol=1e-9)


def accuracy(model: Any, dataset: Any) -> float:
    """Fraction of ``dataset`` that ``model`` classifies right (argmax of the logits)."""
    from minidist.autograd import Tensor, no_grad

    with no_grad():
        logits = model(Tensor(dataset.x)).data
    return float((np.asarray(logits).argmax(axis=1) == dataset.y).mean())


def check_training(train_fn: Callable[[Any], Any], train: Any, test: Any, what: str,
                   at_least: float = 0.9) -> float:
    """``train_fn(train)`` must return a model whose logits on ``test`` have one row per
    image and one column per class and that classifies at least ``at_least`` of it
    right. Returns that accuracy. How long training may take is the grader's cell
    timeout (course settings), not a clock read here: a check never grades wall time."""
    __tracebackhide__ = True
    from minidist.autograd import Tensor, no_grad

    model = train_fn(train)
    expect(callable(model), f"{what}: the function returned {type(model).__name__}, not a "
           "model to call on a batch of images")
    with no_grad():
        logits = model(Tensor(test.x[:2]))
    classes = int(test.y.max()) + 1
    expect(tuple(getattr(logits, "shape", ())) == (2, classes),
           f"{what}: the model maps 2 images to an output of shape "
           f"{tuple(getattr(logits, 'shape', ()))}, expected (2, {classes}) logits")
    score = accuracy(model, test)
    expect(score >= at_least, f"{what}: test accuracy {score:.1%}, needs at least "
           f"{at_least:.0%}")
    return score
