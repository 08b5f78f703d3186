"""nn: layers against numpy, parameter registration, checkpoints, losses against references."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidist as md
from minidist import backend, nn
from minidist.nn import functional as F

RNG = np.random.default_rng(1234)


def numpy_log_softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


# ---- Linear, activations, MLP ----------------------------------------------------------------

def test_linear_matches_numpy_and_has_pytorch_layout():
    layer = nn.Linear(5, 3, rng=0)
    assert layer.weight.shape == (3, 5) and layer.bias.shape == (3,)
    assert layer.weight.dtype == np.float32 and layer.weight.requires_grad
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    expected = x @ layer.weight.numpy().T + layer.bias.numpy()
    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-6)
    assert nn.Linear(5, 3, bias=False).bias is None
    assert [n for n, _ in nn.Linear(5, 3, bias=False).named_parameters()] == ["weight"]


@pytest.mark.parametrize("x_shape", [(4, 5), (2, 3, 2), (5,), ()])
def test_linear_names_its_in_features_and_a_wrong_input_shape(x_shape):
    """numpy's error said only "matmul: Input operand 1 has a mismatch in its core dimension"."""
    layer = nn.Linear(3, 2, rng=0)
    with pytest.raises(ValueError, match=rf"Linear\(3, 2, bias=True\) takes inputs whose last "
                                         rf"axis has in_features=3 values, got one of shape "
                                         rf"{re.escape(str(x_shape))}"):
        layer(np.ones(x_shape, np.float32))


@pytest.mark.parametrize("in_features, out_features, batch", [(0, 2, 4), (3, 0, 4), (3, 2, 0),
                                                             (0, 0, 0)])
def test_zero_width_linear_has_gradients_of_the_right_shapes(in_features, out_features,
                                                            batch):
    """backward failed with "cannot reshape array of size 0" on 0 features."""
    layer = nn.Linear(in_features, out_features, dtype=np.float64, rng=0)
    x = md.Tensor(RNG.standard_normal((2, batch, in_features)), requires_grad=True)
    (layer(x) ** 2).sum().backward()
    for tensor in (x, layer.weight, layer.bias):
        assert tensor.grad.shape == tensor.shape
    assert not backend.to_numpy(x.grad).any()  # x or the weight is empty: no path
    assert md.autograd.gradcheck(lambda t, w, b: (F.linear(t, w, b) ** 2).sum(),
                                 x, layer.weight, layer.bias)


def test_linear_fan_in_init_bounds_and_spread():
    layer = nn.Linear(400, 300, rng=0)
    w = layer.weight.numpy()
    bound = 1 / np.sqrt(400)
    assert np.abs(w).max() <= bound and np.abs(layer.bias.numpy()).max() <= bound
    # uniform(-b, b) has standard deviation b / sqrt(3)
    assert abs(w.std() - bound / np.sqrt(3)) < 0.02 * bound


def test_dtype_argument():
    layer = nn.Linear(3, 2, dtype=np.float64, rng=0)
    assert layer.weight.dtype == np.float64 and layer.bias.dtype == np.float64
    assert nn.Embedding(4, 2, dtype=np.float64, rng=0).weight.dtype == np.float64
    assert all(p.dtype == np.float64 for p in nn.MLP([3, 4, 2], dtype=np.float64).parameters())


def test_seeding_is_reproducible():
    nn.manual_seed(7)
    first = nn.MLP([6, 5, 4]).state_dict()
    nn.manual_seed(7)
    second = nn.MLP([6, 5, 4]).state_dict()
    third = nn.MLP([6, 5, 4]).state_dict()  # the global generator has moved on
    for name in first:
        np.testing.assert_array_equal(first[name], second[name])
    assert not np.array_equal(first["0.weight"], third["0.weight"])
    a, b = nn.Linear(4, 4, rng=3), nn.Linear(4, 4, rng=3)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())


@pytest.mark.parametrize("activation, fn", [
    ("relu", lambda h: np.maximum(h, 0)),
    ("tanh", np.tanh),
    ("sigmoid", lambda h: 1 / (1 + np.exp(-h))),
])
def test_mlp_structure_and_forward(activation, fn):
    model = nn.MLP([6, 8, 7, 3], activation=activation, rng=0)
    assert [type(m).__name__ for m in model] == [
        "Linear", type(model[1]).__name__, "Linear", type(model[1]).__name__, "Linear"]
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    state = model.state_dict()
    h = fn(x @ state["0.weight"].T + state["0.bias"])
    h = fn(h @ state["2.weight"].T + state["2.bias"])
    logits = h @ state["4.weight"].T + state["4.bias"]   # no activation after the last layer
    out = model(x)
    assert out.shape == (5, 3)
    np.testing.assert_allclose(out.numpy(), logits, rtol=1e-5, atol=1e-6)


def test_mlp_rejects_bad_arguments():
    with pytest.raises(ValueError, match="activation"):
        nn.MLP([2, 2], activation="gelu")
    with pytest.raises(ValueError, match="at least"):
        nn.MLP([2])


def test_mlp_gradients_match_finite_differences():
    model = nn.MLP([3, 4, 2], activation="tanh", dtype=np.float64, rng=0)
    x = RNG.standard_normal((5, 3))
    w0, b0, w1, b1 = model.parameters()

    def loss_of(w0, b0, w1, b1):
        h = F.linear(x, w0, b0).tanh()
        return F.cross_entropy(F.linear(h, w1, b1), np.array([0, 1, 1, 0, 1]))

    assert md.autograd.gradcheck(loss_of, w0, b0, w1, b1)


def test_embedding_gathers_rows_and_accumulates_repeats():
    table = nn.Embedding(6, 3, rng=0)
    ids = np.array([[1, 4], [1, 1]])
    out = table(ids)
    assert out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out.numpy(), table.weight.numpy()[ids])
    out.sum().backward()
    expected = np.zeros((6, 3), dtype=np.float32)
    expected[1], expected[4] = 3.0, 1.0  # row 1 read three times
    np.testing.assert_array_equal(table.weight.grad, expected)


# ---- Module: registration, modes, checkpoints ------------------------------------------------

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(np.ones(2, dtype=np.float32))
        self.inner = nn.Linear(2, 2, rng=0)
        self.extras = nn.ModuleList([nn.Linear(2, 1, rng=1), nn.Tanh()])
        self.not_a_parameter = md.Tensor(np.zeros(2))

    def forward(self, x):
        return self.extras[0](self.inner(x) * self.scale)


def test_registration_order_and_dotted_names():
    block = Block()
    names = [n for n, _ in block.named_parameters()]
    assert names == ["scale", "inner.weight", "inner.bias", "extras.0.weight", "extras.0.bias"]
    assert [n for n, _ in block.named_modules()] == ["", "inner", "extras", "extras.0",
                                                     "extras.1"]
    assert len(block.parameters()) == 5 and len(block.extras) == 2
    assert block(np.ones((3, 2), dtype=np.float32)).shape == (3, 1)


def test_reassigning_and_deleting_attributes_updates_registration():
    block = Block()
    block.inner = None
    assert "inner.weight" not in dict(block.named_parameters())
    del block.scale
    assert [n for n, _ in block.named_parameters()] == ["extras.0.weight", "extras.0.bias"]
    with pytest.raises(AttributeError, match="super"):
        class Forgetful(nn.Module):
            def __init__(self):
                self.w = nn.Parameter(np.ones(1))
        Forgetful()


def test_shared_parameter_is_listed_once():
    first = nn.Linear(3, 3, rng=0)
    model = nn.Sequential(first, nn.ReLU(), first)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]


def test_train_eval_and_zero_grad():
    model = Block()
    assert all(m.training for m in model.modules())
    assert model.eval() is model and not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    model(np.ones((1, 2), dtype=np.float32)).sum().backward()
    assert model.inner.weight.grad is not None
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_state_dict_round_trip_is_a_copy_and_loads_in_place():
    source, target = nn.MLP([4, 5, 3], rng=0), nn.MLP([4, 5, 3], rng=1)
    state = source.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    weight_array = target[0].weight.data
    target.load_state_dict(state)
    assert target[0].weight.data is weight_array  # same array, new values
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())
    source[0].weight.data += 1.0
    assert not np.array_equal(state["0.weight"], source[0].weight.numpy())


def test_load_state_dict_errors_name_the_problem_and_change_nothing():
    model = nn.MLP([4, 5, 3], rng=0)
    before = model.state_dict()
    state = nn.MLP([4, 5, 3], rng=1).state_dict()
    missing = {k: v for k, v in state.items() if k != "2.bias"}
    with pytest.raises(KeyError, match="2.bias"):
        model.load_state_dict(missing)
    with pytest.raises(KeyError, match="extra.weight"):
        model.load_state_dict({**state, "extra.weight": np.zeros(1)})
    with pytest.raises(ValueError, match=r"0\.weight.*\(5, 4\)"):
        model.load_state_dict({**state, "0.weight": np.zeros((4, 5), dtype=np.float32)})
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[name])
    model.load_state_dict(missing, strict=False)  # loads what is there
    np.testing.assert_array_equal(model[0].weight.numpy(), state["0.weight"])
    np.testing.assert_array_equal(model[2].bias.numpy(), before["2.bias"])


# ---- losses -----------------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_numpy(reduction):
    logits = RNG.standard_normal((6, 4)).astype(np.float32) * 3
    targets = np.array([0, 3, 1, 1, 2, 3])
    per_example = -numpy_log_softmax(logits.astype(np.float64))[np.arange(6), targets]
    expected = {"mean": per_example.mean(), "sum": per_example.sum(),
                "none": per_example}[reduction]
    got = F.cross_entropy(md.Tensor(logits), targets, reduction=reduction)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5)


def test_cross_entropy_is_stable_for_huge_logits():
    logits = md.Tensor(np.array([[1000.0, 0.0, -1000.0], [-500.0, 500.0, 0.0]],
                                dtype=np.float32), requires_grad=True)
    loss = F.cross_entropy(logits, np.array([0, 0]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [0.0, 1000.0], atol=1e-3)
    loss.sum().backward()
    assert np.all(np.isfinite(logits.grad))


def test_cross_entropy_gradient_is_softmax_minus_one_hot():
    z = RNG.standard_normal((5, 3))
    targets = np.array([2, 0, 1, 1, 0])
    logits = md.Tensor(z, requires_grad=True)
    F.cross_entropy(logits, targets).backward()
    softmax = np.exp(numpy_log_softmax(z))
    np.testing.assert_allclose(logits.grad, (softmax - np.eye(3)[targets]) / 5, atol=1e-12)
    for reduction in ("mean", "sum", "none"):
        assert md.autograd.gradcheck(
            lambda t, r=reduction: F.cross_entropy(t, targets, reduction=r),
            md.Tensor(z, requires_grad=True))


@settings(deadline=None, max_examples=30)
@given(rows=st.integers(1, 6), classes=st.integers(1, 7), scale=st.floats(0.1, 80.0),
       seed=st.integers(0, 2**31))
def test_cross_entropy_property_any_shape_and_scale(rows, classes, scale, seed):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((rows, classes)) * scale
    targets = rng.integers(0, classes, size=rows)
    logits = md.Tensor(z, requires_grad=True)
    loss = F.cross_entropy(logits, targets)
    log_p = numpy_log_softmax(z)
    np.testing.assert_allclose(loss.item(), -log_p[np.arange(rows), targets].mean(),
                               rtol=1e-10, atol=1e-12)
    loss.backward()
    np.testing.assert_allclose(logits.grad, (np.exp(log_p) - np.eye(classes)[targets]) / rows,
                               atol=1e-12)


def test_cross_entropy_rejects_bad_targets():
    logits = md.Tensor(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        F.cross_entropy(logits, np.array([0, 3]))
    with pytest.raises(ValueError, match="2 rows"):
        F.cross_entropy(logits, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(logits, np.array([0, 1]), reduction="max")
    for labels in (np.array([0.0, 1.0]), np.array([True, False])):  # not class ids
        with pytest.raises(TypeError, match=f"integer class ids, got dtype {labels.dtype}"):
            F.cross_entropy(logits, labels)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_matches_numpy_and_finite_differences(reduction):
    prediction = RNG.standard_normal((4, 3))
    target = RNG.standard_normal((4, 3))
    squared = (prediction - target) ** 2
    expected = {"mean": squared.mean(), "sum": squared.sum(), "none": squared}[reduction]
    got = F.mse_loss(md.Tensor(prediction), target, reduction=reduction)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    assert md.autograd.gradcheck(lambda p: F.mse_loss(p, target, reduction=reduction),
                                 md.Tensor(prediction, requires_grad=True))


@pytest.mark.parametrize("x_shape", [(5, 4), (4,), (2, 3, 4)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_is_one_op_with_the_gradients_of_three(x_shape, with_bias):
    rng = np.random.default_rng(7)
    x = md.Tensor(rng.normal(size=x_shape), requires_grad=True)
    w = md.Tensor(rng.normal(size=(3, 4)), requires_grad=True)
    b = md.Tensor(rng.normal(size=3), requires_grad=True) if with_bias else None
    y = F.linear(x, w, b)
    unfused = x @ w.T + b if with_bias else x @ w.T
    np.testing.assert_array_equal(y.data, unfused.data)
    assert y._ctx is not None and len(y._ctx.parents) == (3 if with_bias else 2)
    inputs = (x, w, b) if with_bias else (x, w)
    assert md.autograd.gradcheck(lambda *t: (F.linear(t[0], t[1], *t[2:]) ** 2).sum(), *inputs)


def test_layer_norm_normalises_rows_and_passes_finite_differences():
    norm = md.nn.LayerNorm(5, dtype=np.float64)
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(4, 5))
    y = norm(md.Tensor(x)).data
    np.testing.assert_allclose(y.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=1), 1 / (1 + 1e-5 / x.var(axis=1)), rtol=1e-10)
    norm.weight.data[:] = backend.xp().arange(1.0, 6.0)
    norm.bias.data[:] = 0.5
    upstream = md.Tensor(np.random.default_rng(1).normal(size=(4, 5)))
    assert md.gradcheck(lambda t: (norm(t) * upstream).sum(),
                        md.Tensor(x, requires_grad=True))
