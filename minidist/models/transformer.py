"""A small decoder-only transformer, written once for any tensor-parallel degree.

    model = Transformer(vocab=32, d=32, heads=4, layers=2, context=16, c=c, seed=0)
    logits = model(ids)                     # ids (batch, tokens) -> (batch, tokens, vocab)
    loss = sequence_loss(logits, next_ids)

A Sequential: token and position embeddings (``Embed``), then ``layers`` blocks of

    x = x + attention(norm1(x))             (ParallelSelfAttention: heads split over c)
    x = x + mlp(norm2(x))                   (ParallelMLP: hidden units split over c)

then a final norm and the output projection to the vocabulary (``Head``).
Being a Sequential, a pipeline can cut it into stages. ``c`` is the
tensor-parallel group: with one rank the blocks are whole and this is the
single-process model; with P ranks every rank builds the same whole weights
from ``seed`` and keeps its slice of each block (``tensor_parallel.py``), so
P ranks compute what one does. Embeddings, norms and the output projection
are replicated: after each block's allreduce every rank holds the same
activations, so these get the same gradients everywhere and need no message.

Cost per block and pass: one allreduce of the (batch · tokens · d) activations
for attention and one for the MLP; 1/P of the blocks' flops on each rank.
"""

from __future__ import annotations

import numpy as np

from minidist import comm
from minidist.autograd import Tensor
from minidist.nn import Embedding, LayerNorm, Linear, Module, Sequential
from minidist.nn import functional as F
from minidist.parallel.tensor_parallel import ParallelMLP, ParallelSelfAttention


class Block(Module):
    """One pre-norm transformer block with its attention and MLP split over ``c``."""

    def __init__(self, d: int, heads: int, c, rng: np.random.Generator, dtype) -> None:
        super().__init__()
        scale = 1 / np.sqrt(d)
        whole = {name: rng.normal(0, scale, shape).astype(dtype) for name, shape in
                 (("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)), ("wo", (d, d)),
                  ("w1", (4 * d, d)), ("w2", (d, 4 * d)))}
        zeros = np.zeros(d, dtype)
        self.norm1, self.norm2 = LayerNorm(d, dtype=dtype), LayerNorm(d, dtype=dtype)
        self.attention = ParallelSelfAttention(whole["wq"], whole["wk"], whole["wv"],
                                               whole["wo"], zeros, heads, c)
        self.mlp = ParallelMLP(whole["w1"], np.zeros(4 * d, dtype), whole["w2"], zeros, c)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Embed(Module):
    """Token embedding plus position embedding: ids (batch, tokens) -> (batch, tokens, d)."""

    def __init__(self, vocab: int, d: int, context: int, rng: np.random.Generator,
                 dtype) -> None:
        super().__init__()
        self.context = context
        self.tokens = Embedding(vocab, d, dtype=dtype, rng=rng)
        self.positions = Embedding(context, d, dtype=dtype, rng=rng)

    def forward(self, ids) -> Tensor:
        ids = ids.data if isinstance(ids, Tensor) else ids
        if ids.shape[1] > self.context:
            raise ValueError(f"{ids.shape[1]} tokens exceed the context of {self.context}")
        return self.tokens(ids) + self.positions(np.arange(ids.shape[1]))


class Head(Module):
    """The final norm and the projection to the vocabulary: (..., d) -> (..., vocab) logits."""

    def __init__(self, d: int, vocab: int, rng: np.random.Generator, dtype) -> None:
        super().__init__()
        self.norm = LayerNorm(d, dtype=dtype)
        self.out = Linear(d, vocab, dtype=dtype, rng=rng)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.norm(x))


class Transformer(Sequential):
    """Embed, ``layers`` Blocks, Head, as a Sequential (so a pipeline can cut it into stages).

    ``c``: the tensor-parallel group (default: one rank, the whole blocks).
    """

    def __init__(self, vocab: int, d: int, heads: int, layers: int, context: int, c=None,
                 seed: int = 0, dtype=np.float32) -> None:
        c = c if c is not None else comm.LocalCluster(1).communicators()[0]
        rng = np.random.default_rng(seed)
        super().__init__(Embed(vocab, d, context, rng, dtype),
                         *(Block(d, heads, c, rng, dtype) for _ in range(layers)),
                         Head(d, vocab, rng, dtype))


def sequence_loss(logits: Tensor, targets) -> Tensor:
    """Mean cross-entropy of every position's next-token prediction."""
    targets = targets.data if isinstance(targets, Tensor) else targets
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
