"""Random op graphs: minidist's values and gradients against PyTorch's (skipped without torch)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidist as md

torch = pytest.importorskip("torch")

# each op: (name, arity, function valid for both libraries); inputs stay in a safe range
UNARY = {
    "tanh": lambda a: a.tanh(),
    "sigmoid": lambda a: a.sigmoid(),
    "exp_small": lambda a: (a * 0.3).exp(),
    "log_pos": lambda a: (a * a + 1).log(),
    "relu": lambda a: a.relu(),
    "square": lambda a: a ** 2,
    "neg": lambda a: -a,
    "log_softmax": lambda a: a.log_softmax(-1),
    "transpose_twice": lambda a: a.T.T,
    "sum_keep": lambda a: a.sum(0, keepdims=True) + a,
    "mean_keep": lambda a: a - a.mean(-1, keepdims=True),
    "max_keep": lambda a: a - a.max(-1, keepdims=True),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1),
    "matmul_t": lambda a, b: a @ b.T,
}


def _max_keep_torch(a):
    return a - a.amax(-1, keepdim=True)


def run(program, inputs, lib):
    """Apply the program (a list of (op, operand indices)) to a list of values."""
    values = list(inputs)
    for name, i, j in program:
        if name in BINARY:
            out = BINARY[name](values[i], values[j])
            if name == "matmul_t":  # (3, 4) @ (4, 3) -> (3, 3); bring it back to (3, 4)
                out = out @ values[j]
        elif lib == "torch" and name == "max_keep":
            out = _max_keep_torch(values[i])
        elif lib == "torch" and name == "sum_keep":
            out = values[i].sum(0, keepdim=True) + values[i]
        elif lib == "torch" and name == "mean_keep":
            out = values[i] - values[i].mean(-1, keepdim=True)
        else:
            out = UNARY[name](values[i])
        values.append(out)
    return values[-1]


@st.composite
def programs(draw):
    steps = draw(st.integers(1, 8))
    program = []
    for step in range(steps):
        available = 3 + step
        name = draw(st.sampled_from(sorted(UNARY) + sorted(BINARY)))
        program.append((name, draw(st.integers(0, available - 1)),
                        draw(st.integers(0, available - 1))))
    return program


@settings(max_examples=60, deadline=None)
@given(program=programs(), seed=st.integers(0, 2**16))
def test_random_graph_matches_torch(program, seed):
    data = np.random.default_rng(seed).uniform(-1, 1, (3, 3, 4))
    ours = [md.Tensor(d.copy(), requires_grad=True) for d in data]
    theirs = [torch.tensor(d.copy(), requires_grad=True) for d in data]
    out_ours = run(program, ours, "minidist").sum()
    out_theirs = run(program, theirs, "torch").sum()
    np.testing.assert_allclose(out_ours.item(), out_theirs.item(), rtol=1e-9, atol=1e-9)
    if not out_ours.requires_grad:
        return
    out_ours.backward()
    out_theirs.backward()
    for a, b in zip(ours, theirs, strict=True):
        expected = np.zeros((3, 4)) if b.grad is None else b.grad.numpy()
        got = np.zeros((3, 4)) if a.grad is None else a.grad
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-9)


def test_embedding_gather_matches_torch():
    rng = np.random.default_rng(1)
    table, ids = rng.standard_normal((6, 3)), rng.integers(0, 6, 20)
    ours = md.Tensor(table.copy(), requires_grad=True)
    theirs = torch.tensor(table.copy(), requires_grad=True)
    (ours[ids].tanh() * np.arange(3)).sum().backward()
    (theirs[torch.tensor(ids)].tanh() * torch.arange(3)).sum().backward()
    np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-12)
