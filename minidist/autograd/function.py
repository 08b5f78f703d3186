"""Function: one differentiable operation, its forward and its backward side by side.

A Function works on raw arrays. ``forward(ctx, *inputs)`` computes the output
and saves on ``ctx`` what backward will need; ``backward(ctx, grad)`` receives
dLoss/dOutput and returns dLoss/dInput for every input (``None`` for inputs
that need no gradient). ``Op.apply(*inputs)`` runs forward on tensors and,
when any input requires a gradient, records the op in the graph so that
``Tensor.backward()`` can call its backward later.

Recording can be switched off with ``no_grad()`` (and back on inside it with
``enable_grad()``); the switch is a context variable, so each thread, and each
rank of the in-process transport (a task that may pause inside ``no_grad``
while another rank runs), has its own. ``observe_ops(observer)`` shows every op
a rank applies to an observer: ``checkpoint`` finds the tensors a function
uses that way, ``saved_bytes`` counts what the recorded ops keep.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minidist.autograd.tensor import Tensor

_enabled = contextvars.ContextVar("minidist_grad_enabled", default=True)
_observers: contextvars.ContextVar[tuple] = contextvars.ContextVar("minidist_op_observers",
                                                                  default=())
_callbacks: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "minidist_backward_callbacks", default=None)


def is_grad_enabled() -> bool:
    """True unless this thread (or in-process rank) is inside ``no_grad()``."""
    return _enabled.get()


@contextmanager
def _set(var: contextvars.ContextVar, value: Any):
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


def no_grad():
    """Run a block without recording a graph (evaluation, optimiser updates)."""
    return _set(_enabled, False)


def enable_grad():
    """Record a graph again inside ``no_grad()`` (checkpoint's recomputation in backward)."""
    return _set(_enabled, True)


def observe_ops(observer: Callable[[Context], None]):
    """Call ``observer(ctx)`` after every op this rank applies in the block, recorded
    or not (``ctx.parents`` is empty when the op was not recorded). Outside such a
    block, applying an op costs one lookup more."""
    return _set(_observers, (*_observers.get(), observer))


@contextmanager
def _backward_callbacks():
    """Collect callbacks queued during one backward pass; run them when it ends, or
    their ``on_error`` if it raised (then the error goes on to the caller)."""
    with _set(_callbacks, []) as callbacks:
        try:
            yield
        except BaseException:
            for _, on_error in callbacks:
                if on_error is not None:
                    on_error()
            raise
        for callback, _ in callbacks:
            callback()


def queue_callback(callback, on_error=None) -> None:
    """Run ``callback()`` once the backward pass now running has finished
    (data parallelism waits for its last gradient buckets there); if the pass
    raises instead, ``on_error()`` runs (data parallelism drops the step)."""
    callbacks = _callbacks.get()
    if callbacks is None:
        raise RuntimeError("queue_callback() is only valid while backward() runs")
    callbacks.append((callback, on_error))


class Context:
    """What one application of a Function remembers for its backward.

    Which inputs need a gradient is decided at forward time: a tensor that
    starts to require a gradient later gets none from this graph.
    """

    def __init__(self, fn: type[Function], inputs: tuple[Any, ...],
                 needs_input_grad: tuple[bool, ...] | None = None):
        if needs_input_grad is None:
            from minidist.autograd.tensor import Tensor

            needs_input_grad = tuple([isinstance(x, Tensor) and x.requires_grad for x in inputs])
        self.fn = fn
        self.inputs = inputs  # Tensors (graph parents) and plain constants, in call order
        self.needs_input_grad = needs_input_grad  # for each input: must backward compute it?
        self.saved_tensors: tuple[Any, ...] = ()
        self.parents: list[Tensor] = []  # the inputs that need a gradient: the graph's edges

    def save_for_backward(self, *arrays: Any) -> None:
        self.saved_tensors = arrays


class Function:
    """Base class of every differentiable operation."""

    @staticmethod
    def forward(ctx: Context, *inputs: Any, **options: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs: Any, **options: Any) -> Tensor:
        """Run forward on the inputs' data; record the op when a gradient is needed."""
        from minidist.autograd.tensor import Tensor

        needs = tuple([isinstance(x, Tensor) and x.requires_grad for x in inputs])
        ctx = Context(cls, inputs, needs)
        arrays = [x.data if isinstance(x, Tensor) else x for x in inputs]
        out = Tensor(cls.forward(ctx, *arrays, **options))
        if True in needs and is_grad_enabled():
            ctx.parents = [x for x, need in zip(inputs, needs, strict=True) if need]
            out.requires_grad = True
            out._ctx = ctx
        for observer in _observers.get():
            observer(ctx)
        return out
