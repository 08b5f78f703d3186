"""Tensor: an array that remembers how it was computed.

Reverse-mode automatic differentiation in two steps:

1. Forward: every operation on tensors that need a gradient records a node
   (its Function and inputs, see ``function.py``). The nodes form a graph
   from the leaves (parameters, inputs) to the result.
2. Backward: ``loss.backward()`` lists the graph in topological order and
   walks it in reverse, calling each op's backward rule; leaves keep their
   gradient in ``.grad`` (``engine.py``, Lab 1's Tasks 7 and 8).

``.grad`` is a plain array of the tensor's shape and dtype; it accumulates
across backward calls until ``zero_grad()``. After backward the graph is
freed (the nodes forget their inputs), so memory stays flat over training.

A tensor wraps its array without copying it, and an op saves the arrays it
needs for backward as they are: changing ``.data`` in place between a
forward and its backward (an optimiser step, ``x.data *= 0``, an edit of the
wrapped array) changes the gradients without a word. PyTorch counts versions
and raises there; this engine keeps no count. Replacing ``.data`` with a new
array is safe (backward reads the old one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minidist import backend
from minidist.autograd.function import _backward_callbacks, no_grad


class Tensor:
    """An n-dimensional array with an optional gradient."""

    __array_ufunc__ = None  # numpy_array * tensor defers to Tensor.__rmul__

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None):
        if isinstance(data, Tensor):
            data = data.data
        xp = backend.xp()
        if not isinstance(data, xp.ndarray) or (dtype is not None and data.dtype != dtype):
            data = xp.asarray(data, dtype=dtype)
        self.data = data
        self.grad: Any = None
        self._ctx: Any = None  # the Context of the op that produced this tensor (None: a leaf)
        self._freed = False  # True once backward has released the node that produced it
        self._grad_hooks: list[Callable[[Tensor], None]] = []
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_()

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and self.data.dtype.kind != "f":
            raise TypeError(f"only floating-point tensors can require gradients, not {self.dtype}")
        self.requires_grad = flag
        return self

    # ---- the backward pass ------------------------------------------------------------------

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

        ``grad`` (d loss / d self) defaults to 1 for a scalar; the walk itself is
        ``engine.backward``. Callbacks queued by gradient hooks run when it ends.
        """
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (no graph)")
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(
                    f"backward() on a non-scalar tensor of shape {self.shape} needs a gradient "
                    "argument of that shape (or reduce it first, e.g. .sum())"
                )
            grad = backend.xp_of(self.data).ones_like(self.data)
        else:
            # a copy in this tensor's dtype (as every other gradient is cast to its
            # input's): no leaf may keep (and later add into) the caller's array
            grad = backend.xp_of(self.data).asarray(
                grad.data if isinstance(grad, Tensor) else grad).astype(self.data.dtype)
            if tuple(grad.shape) != self.shape:
                raise ValueError(f"gradient shape {tuple(grad.shape)} != tensor shape {self.shape}")
        with _backward_callbacks():
            engine.backward(self, grad, retain_graph)

    def register_grad_hook(self, hook: Callable[[Tensor], None]) -> Callable[[], None]:
        """Call ``hook(tensor)`` each time backward has finished this leaf's ``.grad``.

        Data parallelism uses it to start communicating a gradient while the
        rest of backward still runs. Returns a function that removes the hook.
        """
        self._grad_hooks.append(hook)
        return lambda: self._grad_hooks.remove(hook)

    def zero_grad(self) -> None:
        self.grad = None

    def detach(self) -> Tensor:
        """The same data, cut from the graph."""
        return Tensor(self.data)

    # ---- array-like conveniences -----------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return int(self.data.size)

    def __len__(self) -> int:
        return len(self.data)

    def numpy(self) -> Any:
        """The data as a numpy array (copied from the GPU when it lives there)."""
        return backend.to_numpy(self.data)

    def item(self) -> float:
        return self.data.item()

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({self.numpy()!r}{grad})"

    # ---- operators: each one is a Function from ops*.py --------------------------------------

    def __add__(self, other): return ops.Add.apply(self, other)
    def __radd__(self, other): return ops.Add.apply(other, self)
    def __sub__(self, other): return ops.Sub.apply(self, other)
    def __rsub__(self, other): return ops.Sub.apply(other, self)
    def __mul__(self, other): return ops.Mul.apply(self, other)
    def __rmul__(self, other): return ops.Mul.apply(other, self)
    def __truediv__(self, other): return ops.Div.apply(self, other)
    def __rtruediv__(self, other): return ops.Div.apply(other, self)
    def __pow__(self, other): return ops.Pow.apply(self, other)
    def __rpow__(self, other): return ops.Pow.apply(other, self)
    def __matmul__(self, other): return ops.MatMul.apply(self, other)
    def __rmatmul__(self, other): return ops.MatMul.apply(other, self)
    def __neg__(self): return ops.Neg.apply(self)
    def __getitem__(self, index): return shape_ops.GetItem.apply(self, index=index)

    def exp(self) -> Tensor: return ops.Exp.apply(self)
    def log(self) -> Tensor: return ops.Log.apply(self)
    def tanh(self) -> Tensor: return ops.Tanh.apply(self)
    def sigmoid(self) -> Tensor: return ops.Sigmoid.apply(self)
    def relu(self) -> Tensor: return ops.ReLU.apply(self)

    def sum(self, axis=None, keepdims: bool = False) -> Tensor:
        # a 0-d tensor has no axis to put back in backward: its sum over the axes numpy
        # allows it (0, -1) is the sum of everything, the tensor itself
        if self.ndim == 0 and axis in (0, -1, (0,), (-1,), ()):
            axis = None
        return reduce_ops.Sum.apply(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims: bool = False) -> Tensor:
        return reduce_ops.Mean.apply(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims: bool = False) -> Tensor:
        return reduce_ops.Max.apply(self, axis=axis, keepdims=keepdims)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return reduce_ops.LogSoftmax.apply(self, axis=axis)

    def reshape(self, *shape) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return shape_ops.Reshape.apply(self, shape=shape)

    def transpose(self, *axes) -> Tensor:
        if len(axes) == 1 and isinstance(axes[0], tuple | list):
            axes = tuple(axes[0])
        return shape_ops.Transpose.apply(self, axes=axes or None)

    @property
    def T(self) -> Tensor:
        return self.transpose()


__all__ = ["Tensor", "no_grad"]

# these modules import Tensor, so they are bound here, after it exists
from minidist.autograd import engine, ops  # noqa: E402
from minidist.autograd import ops_reduce as reduce_ops  # noqa: E402
from minidist.autograd import ops_shape as shape_ops  # noqa: E402
