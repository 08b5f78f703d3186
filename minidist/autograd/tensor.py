"""Tensor: an array that remembers how it was computed, and the backward pass.

Reverse-mode automatic differentiation in two steps:

1. Forward: every operation on tensors that need a gradient records a node
   (its Function and inputs, see ``function.py``). The nodes form a graph
   from the leaves (parameters, inputs) to the result.
2. Backward: ``loss.backward()`` walks the graph from the result back to the
   leaves in reverse topological order: a node runs only after every op that
   used it has passed its gradient back (gradients from several uses are
   summed). Running it hands that gradient to its Function's backward, which
   returns the gradients of the node's inputs. Leaves keep theirs in ``.grad``.
   ``topological_order`` lists the graph; among the nodes that are ready, the
   most recently created runs first (as in PyTorch's engine), so the last
   layer's parameter gradients are final first — data parallelism starts
   sending them while backward goes on (``register_grad_hook``).

``.grad`` is a plain array of the tensor's shape and dtype; it accumulates
across backward calls until ``zero_grad()``. After backward the graph is
freed (the nodes forget their inputs), so memory stays flat over training.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from minidist import backend
from minidist.autograd.function import Context, _backward_callbacks, no_grad

_creation_order = itertools.count()


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
        self._seq = next(_creation_order)  # inputs are always created before their outputs
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

        # How many recorded uses of each tensor have yet to pass their gradient back.
        pending: dict[int, int] = {}
        for node in topological_order(self):
            if node._ctx is not None:
                for parent in node._ctx.parents:
                    pending[id(parent)] = pending.get(id(parent), 0) + 1

        grads = {id(self): grad}
        kept = {id(grad)}  # arrays some leaf keeps as .grad: another leaf must not share them
        ready: list[tuple[int, Tensor]] = []  # a heap: the most recently created node first
        with _backward_callbacks():
            if self._ctx is None:
                self._finish_leaf(grads.pop(id(self)), kept)
            else:
                heapq.heappush(ready, (-self._seq, self))
            while ready:
                _, node = heapq.heappop(ready)
                ctx = node._ctx
                input_grads = ctx.fn.backward(ctx, grads.pop(id(node)))
                if not isinstance(input_grads, tuple):
                    input_grads = (input_grads,)
                for x, gx in zip(ctx.inputs, input_grads, strict=False):
                    if not isinstance(x, Tensor) or not x.requires_grad:
                        continue
                    if gx is not None:
                        if gx.dtype != x.dtype:
                            gx = gx.astype(x.dtype)
                        grads[id(x)] = grads[id(x)] + gx if id(x) in grads else gx
                    pending[id(x)] -= 1
                    if pending[id(x)] == 0 and id(x) in grads:  # every use has reported
                        if x._ctx is None:
                            x._finish_leaf(grads.pop(id(x)), kept)
                        else:
                            heapq.heappush(ready, (-x._seq, x))
                if not retain_graph:
                    node._ctx, node._freed = None, True

    def _finish_leaf(self, g: Any, kept: set[int]) -> None:
        """A leaf's gradient for this backward is complete: keep it, then tell the hooks."""
        if self._freed:
            raise RuntimeError(
                "backward through a graph that was already freed: pass "
                "retain_graph=True to the first backward() to call it twice"
            )
        self._accumulate_grad(g, kept)
        for hook in self._grad_hooks:
            hook(self)

    def register_grad_hook(self, hook: Callable[[Tensor], None]) -> None:
        """Call ``hook(tensor)`` each time backward has finished this leaf's ``.grad``.

        Data parallelism uses it to start communicating a gradient while the
        rest of backward still runs.
        """
        self._grad_hooks.append(hook)

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
