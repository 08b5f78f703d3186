"""Tensor parallelism: the split blocks against the whole ones (float64), one allreduce each way."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import minidist as md
from minidist import comm
from minidist.nn import functional as F
from minidist.parallel.tensor_parallel import (
    ParallelMLP,
    ParallelSelfAttention,
    causal_mask,
)

D, HIDDEN, HEADS, BATCH, TOKENS = 8, 12, 4, 3, 5


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = {"w1": (HIDDEN, D), "b1": (HIDDEN,), "w2": (D, HIDDEN), "b2": (D,),
              "wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "bo": (D,)}
    return {name: rng.normal(size=shape) / math.sqrt(D) for name, shape in shapes.items()}


def inputs(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, TOKENS, D)), rng.normal(size=(BATCH, TOKENS, D))


def whole_mlp(w, x):
    return F.linear(F.linear(x, w["w1"], w["b1"]).relu(), w["w2"], w["b2"])


def whole_attention(w, x):
    def heads(y):
        return y.reshape(BATCH, TOKENS, HEADS, D // HEADS).transpose(0, 2, 1, 3)

    q, k, v = (heads(F.linear(x, w[name])) for name in ("wq", "wk", "wv"))
    scores = (q @ k.transpose(0, 1, 3, 2)) * (1 / math.sqrt(D // HEADS))
    attended = (scores + causal_mask(TOKENS, scores.dtype)).log_softmax(axis=-1).exp() @ v
    return F.linear(attended.transpose(0, 2, 1, 3).reshape(BATCH, TOKENS, D), w["wo"], w["bo"])


def reference(block: str):
    """Output, input gradient and weight gradients of the whole block, in one process."""
    w = {name: md.Tensor(value, requires_grad=True) for name, value in weights().items()}
    x_data, upstream = inputs()
    x = md.Tensor(x_data, requires_grad=True)
    y = (whole_mlp if block == "mlp" else whole_attention)(w, x)
    (y * md.Tensor(upstream)).sum().backward()
    return y.data, x.grad, {name: t.grad for name, t in w.items() if t.grad is not None}


def split_rank(c, block: str):
    w = weights()
    if block == "mlp":
        layer = ParallelMLP(w["w1"], w["b1"], w["w2"], w["b2"], c)
    else:
        layer = ParallelSelfAttention(w["wq"], w["wk"], w["wv"], w["wo"], w["bo"], HEADS, c)
    x_data, upstream = inputs()
    x = md.Tensor(x_data, requires_grad=True)
    before = c.stats.messages_sent
    y = layer(x)
    forward_messages = c.stats.messages_sent - before
    (y * md.Tensor(upstream)).sum().backward()
    backward_messages = c.stats.messages_sent - before - forward_messages
    start = c.stats.messages_sent
    comm.allreduce(np.zeros(y.shape), c, check=False)  # what one allreduce of y costs
    one_allreduce = c.stats.messages_sent - start
    grads = {name: p.grad for name, p in layer.named_parameters()}
    return y.data, x.grad, grads, (forward_messages, backward_messages, one_allreduce)


def gathered(results, block: str, name: str) -> np.ndarray:
    """The whole gradient of ``name`` from the ranks' slices."""
    parts = [r[2][name] for r in results]
    if name in ("b2", "bo"):
        return parts[0]
    axis = 1 if name in ("w2", "wo") else 0
    return np.concatenate(parts, axis=axis)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("block", ["mlp", "attention"])
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_split_block_equals_the_whole_with_one_allreduce_each_way(block, ranks):
    y, x_grad, w_grads = reference(block)
    results = md.launch(split_rank, ranks, args=(block,), backend="local", timeout=30)
    for out, grad, _, (forward, backward, one) in results:
        np.testing.assert_allclose(out, y, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(grad, x_grad, rtol=1e-10, atol=1e-12)
        assert forward == backward == one  # exactly one allreduce forward, one backward
    for name, expected in w_grads.items():
        np.testing.assert_allclose(gathered(results, block, name), expected, rtol=1e-10,
                                   atol=1e-12, err_msg=name)
    if block == "mlp" and ranks > 1:
        assert results[0][2]["b2"] is not None


def test_a_split_that_does_not_divide_is_named():
    w = weights()

    def heads_over_three(c):
        ParallelSelfAttention(w["wq"], w["wk"], w["wv"], w["wo"], w["bo"], HEADS, c)

    with pytest.raises(Exception, match="4 heads cannot be split over 3 ranks"):
        md.launch(heads_over_three, 3, backend="local", timeout=30)

    def hidden_over_five(c):
        ParallelMLP(w["w1"], w["b1"], w["w2"], w["b2"], c)

    with pytest.raises(Exception, match="12 hidden units cannot be split over 5 ranks"):
        md.launch(hidden_over_five, 5, backend="local", timeout=30)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("activation", ["swish", "linear", None, ["relu"]])
def test_an_unknown_activation_is_refused_at_construction_on_every_rank(activation):
    """Once an AttributeError ('swish') or a TypeError ('linear') in the first forward."""
    w = weights()

    def build(c):
        with pytest.raises(ValueError, match=re.escape(
                "activation must be one of ['relu', 'sigmoid', 'tanh'], "
                f"got {activation!r}")):
            ParallelMLP(w["w1"], w["b1"], w["w2"], w["b2"], c, activation=activation)
        return ParallelMLP(w["w1"], w["b1"], w["w2"], w["b2"], c, activation="tanh").activation

    assert md.launch(build, 2, backend="local", timeout=30) == ["tanh", "tanh"]


def train_transformer(c, steps: int, dtype=np.float64):
    """Losses of ``steps`` Adam steps of the small transformer, tensor-parallel over ``c``."""
    from minidist.data.characters import CharacterText
    from minidist.models.transformer import Transformer, sequence_loss

    text = CharacterText.generate(seed=0, num_tokens=3000)
    model = Transformer(len(text.alphabet), d=16, heads=4, layers=2, context=12, c=c,
                        seed=0, dtype=dtype)
    opt = md.optim.Adam(model.parameters(), lr=3e-3)
    rng, losses = np.random.default_rng(1), []
    for _ in range(steps):
        ids, targets = text.batch(rng, 8, 12)
        opt.zero_grad()
        loss = sequence_loss(model(ids), targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.timeout(120)
def test_a_tensor_parallel_transformer_trains_as_one_process():
    one = md.launch(train_transformer, 1, args=(6,), backend="local", timeout=60)[0]
    two = md.launch(train_transformer, 2, args=(6,), backend="local", timeout=60)
    assert one[-1] < one[0]
    for losses in two:
        np.testing.assert_allclose(losses, one, rtol=1e-10)
