"""Reductions (sum, mean, max) and log-softmax, each forward beside its backward.

A reduction removes axes; its backward puts them back (as size-1 axes when
``keepdims`` was False) and broadcasts the gradient over them.
"""

from __future__ import annotations

from numbers import Integral

from minidist.autograd.function import Context, Function
from minidist.backend import xp_of
from minidist.util.answers import lab_answer


def _axes(axis, ndim: int) -> tuple[int, ...]:
    """The reduced axes as a tuple of non-negative ints (None means all)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, Integral) else tuple(axis)  # numpy's ints too
    return tuple(a % ndim for a in axes) if ndim else ()


def _restore_axes(grad, shape: tuple[int, ...], axis, keepdims: bool):
    """Reshape a reduced gradient so that it broadcasts against the input's shape."""
    if keepdims:
        return grad
    kept = [1 if i in _axes(axis, len(shape)) else n for i, n in enumerate(shape)]
    return grad.reshape(kept)


class Sum(Function):
    @staticmethod
    def forward(ctx: Context, a, axis=None, keepdims=False):
        ctx.shape, ctx.axis, ctx.keepdims = a.shape, axis, keepdims
        return a.sum(axis=axis, keepdims=keepdims)

    @staticmethod
    @lab_answer("lab01_backward_sum")
    def backward(ctx: Context, grad):
        xp = xp_of(grad)
        if ctx.axis is not None and not ctx.keepdims:
            grad = xp.expand_dims(grad, ctx.axis)
        return xp.broadcast_to(grad, ctx.shape)


class Mean(Function):
    @staticmethod
    def forward(ctx: Context, a, axis=None, keepdims=False):
        ctx.shape, ctx.axis, ctx.keepdims = a.shape, axis, keepdims
        return a.mean(axis=axis, keepdims=keepdims)

    @staticmethod
    def backward(ctx: Context, grad):
        count = 1
        for i in _axes(ctx.axis, len(ctx.shape)):
            count *= ctx.shape[i]
        grad = _restore_axes(grad, ctx.shape, ctx.axis, ctx.keepdims) / count
        return xp_of(grad).broadcast_to(grad, ctx.shape)


class Max(Function):
    """Maximum over axes; the gradient is shared equally by tied maxima."""

    @staticmethod
    def forward(ctx: Context, a, axis=None, keepdims=False):
        out = a.max(axis=axis, keepdims=keepdims)
        ctx.axis, ctx.keepdims = axis, keepdims
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx: Context, grad):
        a, out = ctx.saved_tensors
        out = _restore_axes(out, a.shape, ctx.axis, ctx.keepdims)
        grad = _restore_axes(grad, a.shape, ctx.axis, ctx.keepdims)
        is_max = a == out
        ties = is_max.sum(axis=_axes(ctx.axis, a.ndim), keepdims=True)
        return is_max * (grad / ties)


class LogSoftmax(Function):
    """log softmax(a) = a - log Σ exp(a), stable by subtracting the maximum first.

    Backward: with p = softmax(a) = exp(out), dL/da = grad - p · Σ grad.
    """

    @staticmethod
    def forward(ctx: Context, a, axis=-1):
        xp = xp_of(a)
        shifted = a - a.max(axis=axis, keepdims=True)
        out = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        ctx.axis = axis
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @lab_answer("lab01_backward_log_softmax")
    def backward(ctx: Context, grad):
        (out,) = ctx.saved_tensors
        return grad - xp_of(out).exp(out) * grad.sum(axis=ctx.axis, keepdims=True)
