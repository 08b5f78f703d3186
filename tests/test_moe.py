"""Mixture of experts: the layer against a loop over tokens written from the definition, expert
parallelism against one process (forward and every gradient, float64, P 1, 2, 4, top-1 and top-2),
finite differences, the load table under a skewed gate, and the traffic of the docstring."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minidist as md
from minidist import backend
from minidist.comm import LocalCluster, NetworkModel
from minidist.comm.cost import check_cost
from minidist.parallel.moe import MoE, average_gradients, format_load, load_table


def tokens(seed: int, n: int, d: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))


def by_definition(moe: MoE, x: np.ndarray) -> np.ndarray:
    """The MoE of one process (every expert here), token by token and slot by slot."""
    logits = x @ moe.gate.weight.numpy().T
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    n, n_experts = probs.shape
    k = moe.top_k
    capacity = (k * n if moe.capacity_factor is None
                else math.ceil(moe.capacity_factor * k * n / n_experts))
    choices = [sorted(range(n_experts), key=lambda e, t=t: (-probs[t, e], e))[:k]
               for t in range(n)]
    taken, out = [0] * n_experts, np.zeros_like(x)
    for j in range(k):  # every first choice before any second one
        for t in range(n):
            e = choices[t][j]
            if taken[e] == capacity:
                continue  # dropped
            taken[e] += 1
            weights = probs[t, choices[t]]
            weight = weights[j] / weights.sum() if k > 1 else weights[j]
            w1, b1, w2, b2 = (p.numpy() for p in moe.experts[e].parameters())
            out[t] += weight * (np.maximum(x[t] @ w1.T + b1, 0) @ w2.T + b2)
    return out


@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("capacity_factor", [0.5, 1.0, None])
def test_one_process_is_the_definition(top_k: int, capacity_factor: float | None) -> None:
    moe = MoE(4, 6, 5, top_k, capacity_factor, dtype=np.float64, rng=1)
    x = tokens(0, 13, 4)
    np.testing.assert_allclose(moe(x).numpy(), by_definition(moe, x), rtol=0, atol=1e-12)
    routed, processed, _ = moe.load.sum(axis=1)
    assert processed <= routed == top_k * 13
    if capacity_factor == 0.5:
        assert processed < routed  # some slots were dropped


def losses_and_gradients(moe: MoE, x: np.ndarray, target: np.ndarray):
    x = md.Tensor(x, requires_grad=True)
    y, target = moe(x), md.Tensor(target)  # the target on the device the test runs on
    ((y - target) * (y - target)).sum().backward()
    return y.numpy(), x.grad, {name: p.grad for name, p in moe.named_parameters()}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("capacity_factor", [1.0, None])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("p", [1, 2, 4])
def test_expert_parallel_equals_one_process(p: int, top_k: int,
                                            capacity_factor: float | None) -> None:
    """Rank r's outputs and input gradient are one process's on rank r's tokens; each
    expert's gradient is one process's summed over every rank's tokens, as is the gate's
    once summed over the ranks."""
    n_experts, n, d, hidden = 8, 12, 4, 6
    xs = [tokens(r, n, d) for r in range(p)]
    targets = [tokens(100 + r, n, d) for r in range(p)]
    single = MoE(d, hidden, n_experts, top_k, capacity_factor, dtype=np.float64, rng=7)
    expected = [losses_and_gradients(single, x, t)[:2] for x, t in zip(xs, targets, strict=True)]
    single_grads = {name: param.grad for name, param in single.named_parameters()}
    if capacity_factor is not None:
        assert single.load[1].sum() < single.load[0].sum()  # the capacity drops some slots

    def body(c):
        moe = MoE(d, hidden, n_experts, top_k, capacity_factor, comm=c, dtype=np.float64, rng=7)
        return (*losses_and_gradients(moe, xs[c.rank], targets[c.rank]), moe.first_expert)

    per_rank = LocalCluster(p).run(body)
    for (y, x_grad, _, _), (y_single, x_grad_single) in zip(per_rank, expected, strict=True):
        np.testing.assert_allclose(y, y_single, rtol=0, atol=1e-10)
        np.testing.assert_allclose(x_grad, x_grad_single, rtol=0, atol=1e-10)
    gate = sum(grads["gate.weight"] for _, _, grads, _ in per_rank)
    np.testing.assert_allclose(gate, single_grads["gate.weight"], rtol=0, atol=1e-10)
    for _, _, grads, first in per_rank:
        for name, grad in grads.items():
            if name.startswith("experts."):
                local, rest = name.split(".", 2)[1:]
                np.testing.assert_allclose(
                    grad, single_grads[f"experts.{first + int(local)}.{rest}"], rtol=0, atol=1e-10)


def test_parameter_gradients_match_finite_differences() -> None:
    moe = MoE(3, 4, 4, top_k=2, capacity_factor=1.0, dtype=np.float64, rng=3)
    x, weight = tokens(0, 5, 3), md.Tensor(tokens(1, 5, 3))

    def objective():  # the balancing loss too: its gradient reaches the gate
        return (moe(x) * weight).sum() + moe.balance_loss

    def loss() -> float:
        return float(objective().item())

    objective().backward()
    for name, param in moe.named_parameters():
        flat, numeric = param.data.reshape(-1), np.zeros(param.size)
        for i in range(param.size):
            original = flat[i].copy()  # on a GPU flat[i] is a view
            flat[i] = original + 1e-6
            above = loss()
            flat[i] = original - 1e-6
            below = loss()
            flat[i] = original
            numeric[i] = (above - below) / 2e-6
        np.testing.assert_allclose(param.grad.reshape(-1), numeric, rtol=1e-5, atol=1e-7,
                                   err_msg=name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("p", [1, 2])
def test_input_gradient_through_the_all_to_alls_matches_finite_differences(p: int) -> None:
    """md.gradcheck on every rank at once: each of its forwards is a forward of all ranks."""
    def body(c):
        moe = MoE(3, 4, 4, top_k=2, capacity_factor=1.0, comm=c, dtype=np.float64, rng=3)
        return md.gradcheck(moe, md.Tensor(tokens(c.rank, 5, 3), requires_grad=True))

    assert LocalCluster(p).run(body) == [True] * p


def test_a_skewed_gate_overloads_one_expert_and_drops_its_tokens() -> None:
    """Every token prefers expert 0: it takes its capacity, the rest are dropped, three
    experts idle; a random gate spreads random tokens far more evenly."""
    p, n_experts, n, d = 2, 4, 16, 4

    def body(c):
        moe = MoE(d, 8, n_experts, top_k=1, capacity_factor=1.25, comm=c, dtype=np.float64,
                  rng=0)
        x = np.abs(tokens(c.rank, n, d))
        moe.gate.weight.data[...] = 0
        moe.gate.weight.data[0] = 1  # expert 0 scores the sum of the (positive) features
        moe(x)
        skewed = load_table(moe), moe.balance_loss.item()
        moe.reset_load()
        moe.gate.weight.data[...] = backend.xp().asarray(tokens(5, n_experts, d))
        moe(tokens(c.rank, n, d))
        return skewed, (load_table(moe), moe.balance_loss.item())

    ((skewed, skewed_balance), (even, even_balance)), _ = LocalCluster(p).run(body)
    capacity = math.ceil(1.25 * n / n_experts)  # per rank
    assert skewed["routed"].tolist() == [p * n, 0, 0, 0]
    assert skewed["processed"].tolist() == [p * capacity, 0, 0, 0]
    assert skewed["capacity"].tolist() == [p * capacity] * n_experts
    assert skewed["dropped"][0] == skewed["dropped_tokens"] == p * (n - capacity)
    assert "imbalance (max/mean routed) 4.00" in format_load(skewed)
    assert skewed_balance > 3.0  # E · P_0, P_0 the mean probability of expert 0
    assert 0.9 < even_balance < 1.3  # 1 when perfectly even
    assert even["routed"].max() < p * n / 2 and even["dropped_tokens"] < skewed["dropped_tokens"]
    assert even["routed"].sum() == p * n


@pytest.mark.parametrize("p", [2, 3, 4])
def test_traffic_is_the_docstring_formula(p: int) -> None:
    """Bytes per rank of a forward and backward: 8(P-1)(E/P + 4) + 2R(out + in), plus the
    agreement check of its five collectives."""
    n_experts, n, d, top_k = 2 * p, 10, 4, 2

    def body(c):
        moe = MoE(d, 5, n_experts, top_k, capacity_factor=1.0, comm=c, dtype=np.float64, rng=0)
        moe(md.Tensor(tokens(c.rank, n, d), requires_grad=True)).sum().backward()
        return moe.load[1]  # the slots each expert processed

    cluster = LocalCluster(p)
    kept = cluster.run(body)
    local = n_experts // p
    check = check_cost(p, 0, NetworkModel()).bytes_sent
    for r in range(p):
        mine = slice(r * local, (r + 1) * local)
        out = kept[r].sum() - kept[r][mine].sum()
        into = sum(kept[s][mine].sum() for s in range(p) if s != r)
        formula = 8 * (p - 1) * (local + 4) + 2 * 8 * d * (out + into) + 5 * check[r]
        assert cluster.stats[r].bytes_sent == formula, r


def test_average_gradients_is_the_gradient_of_the_mean_loss() -> None:
    """After average_gradients, 2 ranks hold one process's gradient of the mean of the two
    ranks' losses: the replicated gate's averaged, each expert's divided by P."""
    d, n_experts, p = 3, 4, 2
    xs = [tokens(r, 6, d) for r in range(p)]
    single = MoE(d, 5, n_experts, top_k=2, dtype=np.float64, rng=2)
    (sum(single(x).sum() for x in xs) / p).backward()

    def body(c):
        moe = MoE(d, 5, n_experts, top_k=2, comm=c, dtype=np.float64, rng=2)
        moe(xs[c.rank]).sum().backward()
        average_gradients(moe, c)
        return {name: param.grad for name, param in moe.named_parameters()}, moe.first_expert

    for grads, first in LocalCluster(p).run(body):
        np.testing.assert_allclose(grads["gate.weight"], single.gate.weight.grad, atol=1e-12)
        np.testing.assert_allclose(grads["experts.1.2.bias"],
                                   single.experts[first + 1][2].bias.grad, atol=1e-12)


def test_a_rank_without_tokens_takes_part() -> None:
    def body(c):
        moe = MoE(3, 4, 4, top_k=2, comm=c, dtype=np.float64, rng=0)
        x = md.Tensor(tokens(c.rank, 5 * c.rank, 3), requires_grad=True)
        y = moe(x)
        (y.sum() + moe.balance_loss).backward()
        return y.shape, x.grad.shape, moe.balance_loss.item(), moe.gate.weight.grad

    (y0, g0, balance0, gate0), (y1, g1, _, gate1) = LocalCluster(2).run(body)
    assert y0 == g0 == (0, 3) and y1 == g1 == (5, 3) and balance0 == 0
    assert np.all(gate0 == 0) and np.all(np.isfinite(gate1))


def test_bad_arguments_are_named() -> None:
    def body(c):
        try:
            MoE(4, 8, 6, comm=c)
        except ValueError as err:
            return str(err)

    messages = LocalCluster(4).run(body)
    assert all("6 experts cannot be spread evenly over 4 ranks" in m for m in messages)
    with pytest.raises(ValueError, match="top_k must be between 1 and n_experts = 4"):
        MoE(4, 8, 4, top_k=5)
    with pytest.raises(ValueError, match="MoE: capacity_factor must be a finite number > 0"):
        MoE(4, 8, 4, capacity_factor=0)
    with pytest.raises(ValueError, match=r"tokens must be \(n, d_model\)"):
        MoE(4, 8, 4)(np.ones((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"must be \(n, d_model\) = \(n, 4\), got shape \(2, 5\)"):
        MoE(4, 8, 4)(np.ones((2, 5), np.float32))  # once numpy's matmul error, deep inside


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kwargs, message", [
    (dict(n_experts=0), "n_experts must be an integer >= 1, got 0"),
    (dict(n_experts=-2), "n_experts must be an integer >= 1, got -2"),
    (dict(top_k=1.5), "top_k must be an integer >= 1, got 1.5"),
    (dict(top_k="1"), "top_k must be an integer >= 1, got '1'"),
    (dict(capacity_factor=math.inf), "MoE: capacity_factor must be a finite number > 0, got inf"),
    (dict(capacity_factor="1"), "MoE: capacity_factor must be a finite number > 0, got '1'"),
    (dict(capacity_factor=-1.0), "MoE: capacity_factor must be a finite number > 0, got -1.0"),
])
def test_sizes_and_capacity_are_checked_at_construction_on_every_rank(kwargs, message) -> None:
    """top_k=1.5 and capacity_factor=inf were accepted, then failed in the first forward."""
    def body(c):
        try:
            MoE(4, 6, **{"n_experts": 4, **kwargs}, comm=c, dtype=np.float64, rng=0)
        except ValueError as err:
            return str(err)

    assert LocalCluster(2).run(body, timeout=30) == [message, message]
