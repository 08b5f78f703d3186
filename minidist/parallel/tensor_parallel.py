"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): one layer's weights split over P ranks.

Every rank sees the whole input and holds a slice of each weight matrix.
Two autograd functions, mirror images, place the communication:

- ``copy_to_ranks`` ("f"): forward the identity (every rank already has
  x), backward an allreduce: each rank's slice of the layer contributed a
  part of dL/dx, and x's gradient is their sum;
- ``sum_over_ranks`` ("g"): forward an allreduce of the ranks' partial
  outputs, backward the identity (every rank needs the whole dL/dy).

The MLP block ``y = act(x A) B`` splits A by **columns** (rank r holds
A[:, r-th slice]: its hidden units, so act applies to its slice alone, no
message) and B by **rows** (the same hidden units): ``x A_r`` then
``act(.) B_r`` is rank r's partial y, and one allreduce sums them. So the
block is ``g(act(f(x) A_r) B_r) + b``: one allreduce forward, one backward.

Self-attention splits by **heads**: rank r holds the query, key and value
columns of its H/P heads (column-parallel) and the matching rows of the
output projection (row-parallel); heads never mix before the output
projection, so again one allreduce each way.

The allreduces skip the agreement check (``check=False``): every rank built
the block from the same whole weights, so shapes agree by construction.

Cost per block and pass, for a batch of n tokens of width d on P ranks
(ring allreduce): 2(P-1)/P·n·d values sent per rank, 2(P-1) message
latencies, and 1/P of the block's flops and weights on each rank.
"""

from __future__ import annotations

import math

from minidist import backend, comm
from minidist.autograd import Function, Tensor
from minidist.nn import Module, Parameter
from minidist.nn import functional as F
from minidist.nn.layers import ACTIVATIONS
from minidist.util.answers import lab_answer


class CopyToRanks(Function):
    """f: identity forward; backward, the sum over the ranks of dL/dx."""

    @staticmethod
    @lab_answer("lab08_f_and_g")
    def forward(ctx, x, c):
        ctx.c = c
        return x

    @staticmethod
    @lab_answer("lab08_f_and_g")
    def backward(ctx, grad):
        # communication: allreduce the partial input gradients of the ranks' slices
        return comm.allreduce(grad, ctx.c, check=False), None


class SumOverRanks(Function):
    """g: forward, the sum over the ranks of their partial outputs; identity backward."""

    @staticmethod
    @lab_answer("lab08_f_and_g")
    def forward(ctx, partial, c):
        # communication: allreduce the partial outputs of the ranks' slices
        return comm.allreduce(partial, c, check=False)

    @staticmethod
    @lab_answer("lab08_f_and_g")
    def backward(ctx, grad):
        return grad, None


def copy_to_ranks(x: Tensor, c) -> Tensor:
    return CopyToRanks.apply(x, c)


def sum_over_ranks(partial: Tensor, c) -> Tensor:
    return SumOverRanks.apply(partial, c)


def slice_of(n: int, c, what: str) -> slice:
    """Rank ``c.rank``'s equal part of ``n`` items (``what`` names them in the error)."""
    if n % c.size:
        raise ValueError(f"tensor parallelism: {n} {what} cannot be split over {c.size} ranks")
    part = n // c.size
    return slice(c.rank * part, (c.rank + 1) * part)


class ParallelMLP(Module):
    """``act(x W1^T + b1) W2^T + b2`` with W1 split by its output rows (columns of A = W1^T)
    and W2 by its input columns, from the whole weights (every rank keeps its slice).

    Weights in the layout of ``nn.Linear``: w1 (hidden, d), b1 (hidden,), w2 (d, hidden),
    b2 (d,). Rank r keeps w1[h_r], b1[h_r], w2[:, h_r] and, added once after the sum, b2.
    """

    def __init__(self, w1, b1, w2, b2, c, activation: str = "relu") -> None:
        super().__init__()
        hidden = slice_of(w1.shape[0], c, "hidden units")
        self.c, self.activation = c, activation
        self.w1, self.b1 = Parameter(w1[hidden].copy()), Parameter(b1[hidden].copy())
        self.w2, self.b2 = Parameter(w2[:, hidden].copy()), Parameter(b2.copy())

    @property
    def activation(self) -> str:
        """The name of the hidden units' function in ``nn.functional``: checked when set."""
        return self._activation

    @activation.setter
    def activation(self, name: str) -> None:
        if not (isinstance(name, str) and name in ACTIVATIONS):
            raise ValueError(f"ParallelMLP: activation must be one of {sorted(ACTIVATIONS)}, "
                             f"got {name!r}")
        self._activation = name

    @lab_answer("lab08_mlp_split")
    def forward(self, x: Tensor) -> Tensor:
        x = copy_to_ranks(x, self.c)                                  # 1. f: identity
        h = getattr(F, self.activation)(F.linear(x, self.w1, self.b1))  # 2. my hidden units
        partial = F.linear(h, self.w2)                                # 3. my part of y
        return sum_over_ranks(partial, self.c) + self.b2              # 4. g: one allreduce


class ParallelSelfAttention(Module):
    """Multi-head self-attention with the heads split over the ranks.

    Whole weights in ``nn.Linear`` layout: wq, wk, wv (d, d), wo (d, d), bias bo (d,);
    ``heads`` heads of width d / heads; rank r keeps the rows of wq, wk, wv of its heads
    and the matching columns of wo. ``causal``: a token attends only to earlier ones.
    """

    def __init__(self, wq, wk, wv, wo, bo, heads: int, c, causal: bool = True) -> None:
        super().__init__()
        d = wq.shape[0]
        if d % heads:
            raise ValueError(f"attention: width {d} is not divisible by {heads} heads")
        mine = slice_of(heads, c, "heads")
        width = d // heads
        columns = slice(mine.start * width, mine.stop * width)
        self.c, self.heads, self.width, self.causal = c, heads // c.size, width, causal
        self.wq, self.wk, self.wv = (Parameter(w[columns].copy()) for w in (wq, wk, wv))
        self.wo, self.bo = Parameter(wo[:, columns].copy()), Parameter(bo.copy())

    def forward(self, x: Tensor) -> Tensor:
        batch, tokens, _ = x.shape
        x = copy_to_ranks(x, self.c)                                  # 1. f: identity
        q, k, v = (self._split_heads(F.linear(x, w), batch, tokens)   # 2. my heads' q, k, v
                   for w in (self.wq, self.wk, self.wv))
        scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(self.width))
        if self.causal:
            scores = scores + causal_mask(tokens, scores.dtype)
        attended = scores.log_softmax(axis=-1).exp() @ v              # 3. attention per head
        merged = attended.transpose(0, 2, 1, 3).reshape(batch, tokens, self.heads * self.width)
        partial = F.linear(merged, self.wo)                           # 4. my part of the output
        return sum_over_ranks(partial, self.c) + self.bo              # 5. g: one allreduce

    def _split_heads(self, y: Tensor, batch: int, tokens: int) -> Tensor:
        return y.reshape(batch, tokens, self.heads, self.width).transpose(0, 2, 1, 3)


def causal_mask(tokens: int, dtype):
    """0 on and below the diagonal, a large negative number above: softmax gives it 0."""
    xp = backend.xp()
    upper = xp.triu(xp.ones((tokens, tokens), dtype=dtype), k=1)
    return upper * -1e9
