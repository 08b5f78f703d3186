"""The backward pass: the graph in topological order, walked in reverse.

These are Lab 1's answers (Tasks 7 and 8), and ``tests/test_lab01.py`` holds
the two side by side so that they cannot drift apart:

1. ``topological_order(root)``: every tensor ``root`` was computed from, each
   after all of its inputs (a depth-first search with an explicit stack, so
   deep graphs do not hit Python's recursion limit).
2. ``backward(root, grad)``: start from d root / d root = ``grad`` and visit
   the tensors in reverse order. Every op that used a tensor comes before it,
   so by its turn every use has passed its gradient back (several uses: the
   contributions are added). An op's output hands its gradient to the op's
   backward rule, which returns the gradients of the op's inputs; a leaf (a
   parameter, an input) accumulates its gradient in ``.grad``.

The search explores an op's first input first: by convention the data path
(``x @ w``, ``Linear(x, w, b)``, ``h + b``). So a layer's parameters come
right before the layer in the order and right after it in the walk, and
backward finishes the last layer's gradients first: data parallelism sends
them while backward goes on (``Tensor.register_grad_hook``). Any topological
order gives the same gradients.

Beneath the walk, two helpers keep it safe without changing what it computes:
``apply_rule`` calls a node's backward rule and checks what comes back, and
``accumulate_grad`` keeps a leaf's gradient without a copy unless it would
share memory with another leaf's. Intermediate gradients are dropped from
``grads`` as soon as they are used, and the walk frees each node's saved
arrays once its rule has run, so memory goes down during backward.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidist.autograd.function import Context
from minidist.autograd.tensor import Tensor
from minidist.util.answers import lab_answer


@lab_answer("lab01_topological_order")
def topological_order(root):
    """Every tensor ``root`` depends on, each once, inputs before outputs."""
    order, visited, stack = [], set(), [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)
        elif id(node) not in visited:
            visited.add(id(node))
            stack.append((node, True))
            if node._ctx is not None:
                # reversed: the stack pops the first input first, so it is explored first
                parents = reversed(node._ctx.parents)
                stack.extend((p, False) for p in parents if id(p) not in visited)
    return order


@lab_answer("lab01_backward_pass")
def backward(root: Tensor, grad: Any, retain_graph: bool = False) -> None:
    """Accumulate d root / d leaf into ``leaf.grad`` for every leaf ``root`` depends on.

    ``grad`` is d root / d root, of ``root``'s shape. ``retain_graph=False``
    frees the graph as it goes (a second call then raises). Cost: one
    backward rule per node, plus O(nodes + edges) for the order.
    """
    grads = {id(root): grad}
    kept = set()  # the arrays that leaves keep as .grad in this pass (see accumulate_grad)
    for node in reversed(topological_order(root)):
        grad = grads.pop(id(node), None)
        if grad is None:
            continue
        if node._ctx is None:
            accumulate_grad(node, grad, kept)
            continue
        input_grads = apply_rule(node._ctx, grad)
        for x, g in zip(node._ctx.inputs, input_grads, strict=True):
            if g is None or not isinstance(x, Tensor) or not x.requires_grad:
                continue
            grads[id(x)] = grads[id(x)] + g if id(x) in grads else g
        if not retain_graph:  # forget the inputs: the arrays saved for the rule are freed now
            node._ctx, node._freed = None, True


# ---- beneath the walk ---------------------------------------------------------------------


def apply_rule(ctx: Context, grad: Any) -> tuple[Any, ...]:
    """``ctx.fn.backward(ctx, grad)``, checked: a tuple with one gradient per input.

    A rule that returns too few or too many, or a gradient of another shape
    than its input's, is an error that names it (a wrong shape would otherwise
    broadcast into ``.grad`` or fail in a later rule). An input that needed no
    gradient at forward time gets None; the others get theirs in their own dtype,
    copied if the rule returned an array it saved or an input's data (later
    passes add into a leaf's ``.grad`` in place).
    """
    input_grads = ctx.fn.backward(ctx, grad)
    if not isinstance(input_grads, tuple):
        input_grads = (input_grads,)
    if len(input_grads) != len(ctx.inputs):
        raise RuntimeError(
            f"{ctx.fn.__name__}.backward returned {len(input_grads)} gradient(s) for "
            f"{len(ctx.inputs)} input(s): return one per input of forward (None for an "
            "input that needs no gradient)"
        )
    checked = []
    for i, (x, g, needed) in enumerate(zip(ctx.inputs, input_grads, ctx.needs_input_grad,
                                           strict=True)):
        if g is None or not needed:
            checked.append(None)
            continue
        if getattr(g, "shape", None) != x.shape:
            got = g.shape if hasattr(g, "shape") else type(g).__name__
            raise RuntimeError(f"{ctx.fn.__name__}.backward returned a gradient of shape {got} "
                               f"for input {i} of shape {x.shape}: return an array of each "
                               "input's shape (unbroadcast what was broadcast)")
        if any(g is held for held in ctx.saved_tensors) or any(
                g is getattr(y, "data", None) for y in ctx.inputs):
            g = g.copy()  # a rule's saved array or an input's data: a leaf adds into .grad
        checked.append(g if g.dtype == x.dtype else g.astype(x.dtype))
    return tuple(checked)


def accumulate_grad(leaf: Tensor, grad: Any, kept: set[int]) -> None:
    """Lab 1's ``leaf.grad = grad.copy() if leaf.grad is None else leaf.grad + grad``,
    copying only when needed and adding in place; then the leaf's hooks (it is final).

    ``kept`` holds the arrays that leaves already keep in this pass. A gradient
    array must never be shared by two leaves: later passes add into ``.grad``
    in place, so one leaf's update would change the other's. Rules do hand
    out shared arrays (``Add`` returns ``grad`` itself for both operands,
    ``Reshape`` a view of it, ``Sum`` a read-only broadcast view), so a leaf
    keeps a copy when the array (or the one it views) is already kept, read-only
    or not contiguous; a fresh array, the common case, is kept as it is.
    """
    if leaf._freed:
        raise RuntimeError(
            "backward through a graph that was already freed: pass "
            "retain_graph=True to the first backward() to call it twice"
        )
    if leaf.grad is not None:
        leaf.grad += grad
    else:
        if isinstance(grad, np.generic):  # numpy's result of 0-d arrays: a scalar, not an array
            grad = np.array(grad)
        owner = grad if grad.base is None else grad.base
        writeable = getattr(grad.flags, "writeable", True)  # cupy arrays have no read-only flag
        if id(owner) in kept or not (writeable and grad.flags.c_contiguous):
            grad = owner = grad.copy()
        kept.add(id(owner))
        leaf.grad = grad
    for hook in leaf._grad_hooks:
        hook(leaf)
