"""Gradient checkpointing: keep a function's inputs, recompute the rest in backward.

Without it, every op of the forward pass keeps its inputs and what it saved
until backward reaches it, so a network of L layers keeps L layers of
activations at once. ``checkpoint(fn, *inputs)`` makes the whole of ``fn``
one node of the graph:

1. Forward: run ``fn`` under ``no_grad()``, so its ops record nothing and
   every array inside ``fn`` is freed as soon as the next op has used it.
   The node keeps ``fn``'s inputs only.
2. Backward: run ``fn`` again on the kept inputs, this time recording a
   graph, and send the incoming gradient back through that graph; the
   gradients reaching the inputs (and the parameters ``fn`` uses) are the
   node's. Its graph is freed as it is walked, before backward goes on.

The gradients are exactly those without checkpointing: the same ops on the
same numbers (``fn`` must compute the same thing each time it runs). The
cost is one more forward pass of ``fn`` in every backward.

Chen et al. (2016, "Training deep nets with sublinear memory cost"): cut L
layers into k segments and checkpoint each. Backward then keeps the k
segments' inputs plus one segment's graph, L/k layers, at a time: memory of
k + L/k layers, least at k = √L, where it is 2√L instead of L, for one extra
forward pass whatever k is (``checkpoint_sequential``; the measured table is
``python -m minidist.bench.checkpointing``).

Parameters need no passing: the tensors that need a gradient and that
``fn``'s ops read without getting them as inputs (a Linear layer's weight
inside ``fn``) are found during the forward pass (``observe_ops``) and
become inputs of the node too. So backward gives them their gradient like
any other input, once per backward and summed with their other uses, and
their gradient hooks (data parallelism's) run when it is final.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from minidist.autograd import engine
from minidist.autograd.function import Context, Function, enable_grad, no_grad, observe_ops
from minidist.autograd.tensor import Tensor
from minidist.util.answers import lab_answer
from minidist.util.parts import chunk_bounds


class Checkpoint(Function):
    """``fn``'s output as one node; its inputs are ``fn``'s inputs, then the tensors
    that ``fn`` used and that need a gradient (``used``)."""

    @staticmethod
    def forward(ctx: Context, *arrays, fn: Callable[..., Tensor], count: int, out: Any):
        ctx.run, ctx.count = fn, count
        ctx.save_for_backward(*arrays[:count])  # fn's inputs: all that is kept
        return out  # fn already ran, under no_grad(), in checkpoint()

    @staticmethod
    def backward(ctx: Context, grad):
        inputs, used = ctx.inputs[:ctx.count], ctx.inputs[ctx.count:]
        # 1. fn's inputs as new leaves; the tensors fn used as leaves for the while
        needs = ctx.needs_input_grad[:ctx.count]
        leaves = [Tensor(array, requires_grad=need) if isinstance(x, Tensor) else array
                  for x, array, need in zip(inputs, ctx.saved_tensors, needs, strict=True)]
        held = [(t.grad, t._grad_hooks, t._ctx) for t in used]
        for t in used:
            t.grad, t._grad_hooks, t._ctx = None, [], None
        try:
            # 2. recompute fn, recording its graph, and walk it back from the incoming gradient
            with enable_grad():
                out = ctx.run(*leaves)
            if not isinstance(out, Tensor) or out.shape != tuple(grad.shape):
                raise RuntimeError(
                    "checkpoint: fn computed something else when it ran again in backward "
                    f"({_describe(out)} instead of a Tensor of shape {tuple(grad.shape)}); "
                    "fn must compute the same thing every time it runs"
                )
            if out.requires_grad:
                # a copy: the leaves add into the gradient they keep, and this one is the caller's
                engine.backward(out, grad.copy())
            used_grads = [t.grad for t in used]
        finally:
            for t, (t_grad, hooks, t_ctx) in zip(used, held, strict=True):
                t.grad, t._grad_hooks, t._ctx = t_grad, hooks, t_ctx
        # 3. the node's gradients: one per input (None where none is needed), then the used ones
        return (*[x.grad if isinstance(x, Tensor) else None for x in leaves], *used_grads)


def checkpoint(fn: Callable[..., Tensor], *inputs: Any) -> Tensor:
    """``fn(*inputs)``, keeping only ``inputs`` for backward and recomputing ``fn`` there.

    ``fn`` returns one Tensor; ``inputs`` hold at least one Tensor (other values
    are passed to ``fn`` as they are). Gradients equal those of ``fn(*inputs)``;
    memory: ``fn``'s inputs instead of everything ``fn``'s ops keep; time: one more
    forward of ``fn`` in backward.
    """
    if not callable(fn):
        raise TypeError(f"checkpoint: fn must be callable, got {_describe(fn)}")
    if not any(isinstance(x, Tensor) for x in inputs):
        raise TypeError(
            "checkpoint: needs at least one Tensor input, got "
            f"({', '.join(_describe(x) for x in inputs)}); pass the tensors fn computes from"
        )
    used: dict[int, Tensor] = {}

    def note(op: Context) -> None:
        for x in op.inputs:
            if isinstance(x, Tensor) and x.requires_grad:
                used.setdefault(id(x), x)

    # fn sees its inputs without their graph, so that `used` holds only what it reads besides
    with no_grad(), observe_ops(note):
        out = fn(*[Tensor(x.data) if isinstance(x, Tensor) else x for x in inputs])
    if not isinstance(out, Tensor):
        raise TypeError(f"checkpoint: fn must return one Tensor, got {_describe(out)}")
    return Checkpoint.apply(*inputs, *used.values(), fn=fn, count=len(inputs), out=out.data)


@lab_answer("lab07_checkpoint")
def checkpoint_sequential(modules: Iterable[Callable[[Tensor], Tensor]], segments: int,
                          x: Any) -> Tensor:
    """Run ``modules`` one after the other on ``x``, cut into ``segments`` runs of
    consecutive modules (``chunk_bounds``: the first ones one longer), each but the
    last checkpointed. The last is not: backward would recompute it at once.

    ``segments = len(modules)`` checkpoints every module; for the L layers of
    an MLP (Linear and activation: 2L - 1 modules), ``segments = L`` puts one
    layer in each segment and ``segments = √L`` gives Chen et al.'s O(√L) memory.
    """
    modules = list(modules)
    if isinstance(segments, bool) or not isinstance(segments, int) or segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be an int >= 1, got {segments!r}")
    if segments > len(modules):
        raise ValueError(f"checkpoint_sequential: {segments} segments for {len(modules)} "
                         "modules: at most one segment per module")
    bounds = chunk_bounds(len(modules), segments)
    x = x if isinstance(x, Tensor) else Tensor(x)  # an array: the input batch
    for number, (start, stop) in enumerate(bounds):
        run = _Segment(modules[start:stop])
        x = run(x) if number == len(bounds) - 1 else checkpoint(run, x)
    return x


class _Segment:
    """Consecutive modules as one function (what ``checkpoint`` recomputes)."""

    def __init__(self, modules: list[Callable[[Tensor], Tensor]]) -> None:
        self.modules = modules

    def __call__(self, x: Tensor) -> Tensor:
        for module in self.modules:
            x = module(x)
        return x


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a Tensor of shape {value.shape}"
    if hasattr(value, "shape"):
        return f"{type(value).__name__} of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:80]
