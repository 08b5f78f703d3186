"""Tensor: an array that remembers how it was computed, and the backward pass.

Reverse-mode automatic differentiation in two steps:

1. Forward: every operation on tensors that need a gradient records a node
   (its Function and inputs, see ``function.py``). The nodes form a graph
   from the leaves (parameters, inputs) to the result.
2. Backward: ``loss.backward()`` orders the graph so that every node comes
   after its inputs (``topological_order``), then walks it in reverse: each
   node hands the gradient it has accumulated to its Function's backward,
   which returns the gradients of its inputs; gradients arriving at the same
   tensor from several uses are summed. Leaves keep theirs in ``.grad``.

``.grad`` is a plain array of the tensor's shape and dtype; it accumulates
across backward calls until ``zero_grad()``. After backward the graph is
freed (the nodes forget their inputs), so memory stays flat over training.
"""

from __future__ import annotations

from typing import Any

from minidist import backend
from minidist.autograd.function import Context, no_grad


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
        self._ctx: Context | None = None  # the node that produced this tensor (None: a leaf)
        self._freed = False  # True once backward has released the node that produced it
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
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad (no graph)")
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(
                    f"backward() on a non-scalar tensor of shape {self.shape} needs a gradient "
                    "argument of that shape (or reduce it first, e.g. .sum())"
                )
            grad = backend.xp_of(self.data).ones_like(self.data)
        elif isinstance(grad, Tensor):
            grad = grad.data
        if tuple(grad.shape) != self.shape:
            raise ValueError(f"gradient shape {tuple(grad.shape)} != tensor shape {self.shape}")

        grads = {id(self): grad}
        kept = {id(grad)}  # arrays some leaf keeps as .grad: another leaf must not share them
        for node in reversed(topological_order(self)):
            g = grads.pop(id(node), None)
            if g is None:
                continue
            ctx = node._ctx
            if ctx is None:
                if node._freed:
                    raise RuntimeError(
                        "backward through a graph that was already freed: pass "
                        "retain_graph=True to the first backward() to call it twice"
                    )
                node._accumulate_grad(g, kept)  # a leaf: keep its gradient
                continue
            input_grads = ctx.fn.backward(ctx, g)
            if not isinstance(input_grads, tuple):
                input_grads = (input_grads,)
            for x, gx in zip(ctx.inputs, input_grads, strict=False):
                if gx is None or not isinstance(x, Tensor) or not x.requires_grad:
                    continue
                if gx.dtype != x.dtype:
                    gx = gx.astype(x.dtype)
                grads[id(x)] = grads[id(x)] + gx if id(x) in grads else gx
            if not retain_graph:
                node._ctx, node._freed = None, True

    def _accumulate_grad(self, g: Any, kept: set[int]) -> None:
        if self.grad is not None:
            self.grad += g
            return
        # Backward rules may hand one array (or views of it) to several inputs, or return a
        # read-only broadcast view: keep such a gradient as a copy, a fresh one as it is.
        owner = g if g.base is None else g.base
        if id(owner) in kept or not (g.flags.writeable and g.flags.c_contiguous):
            g = g.copy()
            owner = g
        kept.add(id(owner))
        self.grad = g

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


def topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor ``root`` depends on (through recorded ops), inputs before outputs.

    An iterative depth-first search: a tensor is appended after all of its
    parents, so reversing the list visits each node before its inputs.
    """
    order: list[Tensor] = []
    visited: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(root, False)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        if node._ctx is not None:
            stack.extend((p, False) for p in node._ctx.parents if id(p) not in visited)
    return order


__all__ = ["Tensor", "topological_order", "no_grad"]

# the op modules import Tensor, so they are bound here, after it exists
from minidist.autograd import ops  # noqa: E402
from minidist.autograd import ops_reduce as reduce_ops  # noqa: E402
from minidist.autograd import ops_shape as shape_ops  # noqa: E402
