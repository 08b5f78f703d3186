"""Elementwise operations and matrix multiplication, each forward beside its backward.

Binary operations broadcast their operands like numpy. Broadcasting copies
an input along some axes, so in backward the gradient of that input is the
sum over those axes: ``unbroadcast`` reduces a gradient back to the shape of
the input it belongs to.

Inputs that are not tensors (Python numbers, arrays) are constants;
``ctx.needs_input_grad`` tells backward which gradients to compute at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidist.autograd.function import Context, Function
from minidist.backend import xp_of
from minidist.util.answers import lab_answer


@lab_answer("lab01_unbroadcast")
def unbroadcast(grad: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``grad`` over the axes that broadcasting added or stretched, to get ``shape``."""
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)  # leading axes that broadcasting prepended
    stretched = [extra + i for i, n in enumerate(shape) if n == 1 and grad.shape[extra + i] != 1]
    return grad.sum(axis=(*range(extra), *stretched), keepdims=True).reshape(shape)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(getattr(x, "shape", ()))


class Add(Function):
    @staticmethod
    def forward(ctx: Context, a, b):
        ctx.shapes = _shape(a), _shape(b)
        return a + b

    @staticmethod
    def backward(ctx: Context, grad):
        sa, sb = ctx.shapes
        return unbroadcast(grad, sa), unbroadcast(grad, sb)


class Sub(Function):
    @staticmethod
    def forward(ctx: Context, a, b):
        ctx.shapes = _shape(a), _shape(b)
        return a - b

    @staticmethod
    def backward(ctx: Context, grad):
        sa, sb = ctx.shapes
        return unbroadcast(grad, sa), unbroadcast(-grad, sb)


class Mul(Function):
    @staticmethod
    def forward(ctx: Context, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    @lab_answer("lab01_backward_mul")
    def backward(ctx: Context, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        grad_a = unbroadcast(grad * b, _shape(a)) if need_a else None
        grad_b = unbroadcast(grad * a, _shape(b)) if need_b else None
        return grad_a, grad_b


class Div(Function):
    @staticmethod
    def forward(ctx: Context, a, b):
        ctx.save_for_backward(a, b)
        return a / b

    @staticmethod
    def backward(ctx: Context, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        grad_over_b = grad / b
        grad_a = unbroadcast(grad_over_b, _shape(a)) if need_a else None
        grad_b = unbroadcast(-grad_over_b * a / b, _shape(b)) if need_b else None
        return grad_a, grad_b


class Neg(Function):
    @staticmethod
    def forward(ctx: Context, a):
        return -a

    @staticmethod
    def backward(ctx: Context, grad):
        return -grad


class Pow(Function):
    """a ** b; d/da = b a^(b-1), d/db = a^b log a (only needed when b is a tensor)."""

    @staticmethod
    def forward(ctx: Context, a, b):
        out = a**b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx: Context, grad):
        a, b, out = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        xp = xp_of(out)
        grad_a = unbroadcast(grad * _zero_where(xp, b == 0, lambda: b * a ** (b - 1)),
                             _shape(a)) if need_a else None
        grad_b = unbroadcast(grad * _zero_where(xp, (a == 0) & (b >= 0),
                                                lambda: out * xp.log(a)),
                             _shape(b)) if need_b else None
        return grad_a, grad_b


def _zero_where(xp, flat, slope):
    """``slope()``, but 0 where the power is ``flat`` (b = 0; a = 0 with b >= 0), where the
    formulas give nan or -inf (0 · inf at a = 0 for b a^(b-1); 1 · log 0 for a^b log a)."""
    if not xp.any(flat):
        return slope()
    with np.errstate(divide="ignore", invalid="ignore"):
        return xp.where(flat, 0, slope())


class Exp(Function):
    @staticmethod
    def forward(ctx: Context, a):
        out = xp_of(a).exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Context, grad):
        (out,) = ctx.saved_tensors
        return grad * out


class Log(Function):
    @staticmethod
    def forward(ctx: Context, a):
        ctx.save_for_backward(a)
        return xp_of(a).log(a)

    @staticmethod
    def backward(ctx: Context, grad):
        (a,) = ctx.saved_tensors
        return grad / a


class Tanh(Function):
    @staticmethod
    def forward(ctx: Context, a):
        out = xp_of(a).tanh(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Context, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)


class Sigmoid(Function):
    """1 / (1 + e^-a), computed as (1 + tanh(a/2)) / 2, which never overflows."""

    @staticmethod
    def forward(ctx: Context, a):
        out = 0.5 * (1 + xp_of(a).tanh(0.5 * a))
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx: Context, grad):
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)


class ReLU(Function):
    """max(a, 0); the gradient passes where out > 0 (that is, a > 0), 0 elsewhere."""

    @staticmethod
    def forward(ctx: Context, a):
        out = xp_of(a).maximum(a, 0)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    @lab_answer("lab01_backward_relu")
    def backward(ctx: Context, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


def _matmul_like(x, y, like):
    """x @ y laid out in memory like ``like``: when ``like`` is a transposed view
    (a Linear layer's ``W.T``), compute (y^T x^T)^T so that the gradient of the
    weight itself comes out contiguous, as BLAS writes it, with no copy later."""
    if like.flags.f_contiguous and not like.flags.c_contiguous:
        return (y.T @ x.T).T
    return x @ y


class MatMul(Function):
    """a @ b, batched over leading axes like numpy.

    For 2-D inputs: out = a b, so dL/da = grad b^T and dL/db = a^T grad.
    A 1-D operand is treated as a row (a) or a column (b) and squeezed back.
    Batch axes broadcast, so their gradients are unbroadcast.
    """

    @staticmethod
    def forward(ctx: Context, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    @lab_answer("lab01_backward_matmul")
    def backward(ctx: Context, grad):
        a, b = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad
        if a.ndim == 2 and b.ndim == 2:  # the common case, without reshapes
            return (_matmul_like(grad, b.T, a) if need_a else None,
                    _matmul_like(a.T, grad, b) if need_b else None)
        xp = xp_of(grad)
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        batch = xp.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        g2 = grad.reshape(batch + (a2.shape[-2], b2.shape[-1]))  # put the squeezed axes back
        grad_a = grad_b = None
        if need_a:
            grad_a = unbroadcast(g2 @ xp.swapaxes(b2, -1, -2), a2.shape).reshape(a.shape)
        if need_b:
            grad_b = unbroadcast(xp.swapaxes(a2, -1, -2) @ g2, b2.shape).reshape(b.shape)
        return grad_a, grad_b
