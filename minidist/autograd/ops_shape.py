"""Operations that move values without changing them: reshape, transpose,
indexing (including the row gather of an embedding lookup), concatenate, stack.

Their backward moves the gradient back to where each value came from.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any

from minidist.autograd.function import Context, Function
from minidist.autograd.tensor import Tensor
from minidist.backend import xp_of


class Reshape(Function):
    @staticmethod
    def forward(ctx: Context, a, shape):
        ctx.shape = a.shape
        return a.reshape(shape)

    @staticmethod
    def backward(ctx: Context, grad):
        return grad.reshape(ctx.shape)


class Transpose(Function):
    """Permute axes (reverse them when ``axes`` is None); backward applies the inverse."""

    @staticmethod
    def forward(ctx: Context, a, axes=None):
        out = a.transpose(axes)  # checks the axes
        ctx.axes = None if axes is None else tuple(axis % a.ndim for axis in axes)  # -1: last
        return out

    @staticmethod
    def backward(ctx: Context, grad):
        if ctx.axes is None:
            return grad.transpose()
        inverse = sorted(range(len(ctx.axes)), key=ctx.axes.__getitem__)  # argsort
        return grad.transpose(inverse)


def _is_basic_index(index: Any) -> bool:
    """True for ints, slices, None and Ellipsis: such an index never repeats an element."""
    items = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, int | slice) or i is None or i is Ellipsis for i in items)


class GetItem(Function):
    """``a[index]``. With integer arrays (an embedding lookup ``table[ids]``) a row can
    be picked several times; its gradient is then the sum of those rows' gradients."""

    @staticmethod
    def forward(ctx: Context, a, index=None):
        if isinstance(index, tuple):
            index = tuple(i.data if isinstance(i, Tensor) else i for i in index)
        elif isinstance(index, Tensor):  # a tensor of indices
            index = index.data
        ctx.shape, ctx.dtype, ctx.index = a.shape, a.dtype, index
        return a[index]

    @staticmethod
    def backward(ctx: Context, grad):
        xp = xp_of(grad)
        full = xp.zeros(ctx.shape, dtype=ctx.dtype)
        if _is_basic_index(ctx.index):
            full[ctx.index] = grad
        else:
            xp.add.at(full, ctx.index, grad)  # repeated indices accumulate
        return full


class Concatenate(Function):
    @staticmethod
    def forward(ctx: Context, *arrays, axis=0):
        ctx.axis = axis
        ctx.sizes = [a.shape[axis] for a in arrays]
        return xp_of(arrays[0]).concatenate(arrays, axis=axis)

    @staticmethod
    def backward(ctx: Context, grad):
        xp = xp_of(grad)
        cuts = list(accumulate(ctx.sizes))[:-1]  # host ints: where each input's block ends
        return tuple(xp.split(grad, cuts, axis=ctx.axis))


class Stack(Function):
    @staticmethod
    def forward(ctx: Context, *arrays, axis=0):
        ctx.axis = axis
        return xp_of(arrays[0]).stack(arrays, axis=axis)

    @staticmethod
    def backward(ctx: Context, grad):
        xp = xp_of(grad)
        return tuple(xp.moveaxis(grad, ctx.axis, 0))


def concatenate(tensors, axis: int = 0):
    """Join tensors along an existing axis."""
    return Concatenate.apply(*_some("concatenate", tensors), axis=axis)


def stack(tensors, axis: int = 0):
    """Join tensors along a new axis."""
    return Stack.apply(*_some("stack", tensors), axis=axis)


def _some(what: str, tensors) -> list:
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what} needs at least one tensor")
    return tensors
