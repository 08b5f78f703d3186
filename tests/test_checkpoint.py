"""Gradient checkpointing gives the gradients of the plain graph, exactly, and keeps less.

Each case runs the same computation with and without ``checkpoint`` on the
same numbers and asserts equal gradients with assert_array_equal: the
recomputation runs the same ops on the same inputs. The one exception is a
tensor whose gradient adds up three or more contributions from inside and
outside the checkpoint: the sum is grouped otherwise, equal to rounding.
``saved_bytes`` shows what each way keeps.
"""

import numpy as np
import pytest

import minidist as md
from minidist.autograd import checkpoint, checkpoint_sequential, saved_bytes
from minidist.nn.functional import cross_entropy

WIDTH, BATCH, CLASSES = 6, 5, 3


def mlp(layers: int, dtype=np.float64) -> md.nn.MLP:
    return md.nn.MLP([WIDTH] * layers + [CLASSES], activation="tanh", dtype=dtype, rng=0)


def batch(dtype=np.float64, requires_grad=False):
    rng = np.random.default_rng(1)
    x = md.Tensor(rng.standard_normal((BATCH, WIDTH)).astype(dtype), requires_grad=requires_grad)
    return x, rng.integers(0, CLASSES, BATCH)


def grads(tensors) -> list:
    out = [t.grad for t in tensors]
    for t in tensors:
        t.grad = None
    return out


def assert_same(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g is None) == (e is None)
        if e is not None:
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("segments", [1, 2, 3, 4, 7])
def test_mlp_gradients_equal_the_plain_graph(segments, dtype):
    model, (x, y) = mlp(4, dtype), batch(dtype, requires_grad=True)
    tensors = [x, *model.parameters()]
    cross_entropy(model(x), y).backward()
    expected = grads(tensors)
    cross_entropy(checkpoint_sequential(model, segments, x), y).backward()
    assert_same(grads(tensors), expected)


def test_several_inputs_constants_and_an_input_without_gradient():
    rng = np.random.default_rng(2)
    a = md.Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    b = md.Tensor(rng.standard_normal((4, 2)), requires_grad=True)
    mask = md.Tensor(rng.standard_normal((3, 2)))  # needs no gradient

    def fn(a, b, mask, scale):
        return ((a @ b).tanh() * mask + a.sum(axis=1, keepdims=True)) ** 2 * scale

    (fn(a, b, mask, 0.5).sigmoid() * b[:3, :]).sum().backward()
    expected = grads([a, b, mask])
    (checkpoint(fn, a, b, mask, 0.5).sigmoid() * b[:3, :]).sum().backward()
    assert_same(grads([a, b, mask]), expected)
    assert expected[2] is None


def test_an_input_used_inside_twice_and_outside_is_equal_to_rounding():
    # a's three contributions are added in another grouping: the two from inside fn
    # first (the recomputed graph's walk), then the one from outside
    rng = np.random.default_rng(2)
    a = md.Tensor(rng.standard_normal((3, 4)), requires_grad=True)

    def fn(a):
        return (a * a.sum(axis=0)).tanh()

    (fn(a) * a).sum().backward()
    expected = grads([a])[0]
    (checkpoint(fn, a) * a).sum().backward()
    np.testing.assert_allclose(grads([a])[0], expected, rtol=1e-15, atol=0)


def test_closure_parameters_get_gradients_when_the_input_needs_none():
    layer = md.nn.Linear(WIDTH, 4, dtype=np.float64, rng=0)
    x, _ = batch()  # the input batch: no gradient, so only the closure makes the node needed
    params = layer.parameters()
    (layer(x).tanh() ** 2).sum().backward()
    expected = grads(params)
    out = checkpoint(lambda h: layer(h).tanh(), x)
    assert out.requires_grad
    (out ** 2).sum().backward()
    assert_same(grads(params), expected)
    assert x.grad is None


def test_nested_checkpoints():
    model, (x, y) = mlp(4), batch(requires_grad=True)
    tensors = [x, *model.parameters()]
    inner, outer = list(model)[2:5], list(model)[:2]

    def run(modules, h):
        for module in modules:
            h = module(h)
        return h

    def both(h):  # a checkpoint inside a checkpoint
        return checkpoint(lambda g: run(inner, g), run(outer, h))

    cross_entropy(run(list(model), x), y).backward()
    expected = grads(tensors)
    cross_entropy(run(list(model)[5:], checkpoint(both, x)), y).backward()
    assert_same(grads(tensors), expected)


def test_a_tensor_from_the_graph_used_inside_and_outside():
    rng = np.random.default_rng(3)
    x = md.Tensor(rng.standard_normal((4, 4)), requires_grad=True)
    w = md.Tensor(rng.standard_normal((4, 4)), requires_grad=True)

    def forward(use_checkpoint: bool):
        h = (x @ w).tanh()  # computed outside fn, read by fn without being its input
        fn = lambda z: (z * h + w).sigmoid()  # noqa: E731
        out = checkpoint(fn, x) if use_checkpoint else fn(x)
        return (out * h).sum() + (w * w).sum()

    forward(False).backward()
    expected = grads([x, w])
    forward(True).backward()
    assert_same(grads([x, w]), expected)


def test_gradients_accumulate_and_hooks_run_once_per_backward():
    model, (x, y) = mlp(3), batch()
    weight = model[0].weight
    calls = []
    weight.register_grad_hook(lambda t: calls.append(t.grad.copy()))
    for _ in range(2):
        cross_entropy(model(x), y).backward()
    expected = grads(model.parameters())
    for _ in range(2):
        cross_entropy(checkpoint_sequential(model, 3, x), y).backward()
    assert_same(grads(model.parameters()), expected)
    assert len(calls) == 4  # once per backward, with and without checkpointing
    np.testing.assert_array_equal(calls[3], calls[1])


def test_gradcheck_by_finite_differences():
    rng = np.random.default_rng(4)
    a = md.Tensor(rng.standard_normal((3, 4)), requires_grad=True)
    b = md.Tensor(rng.standard_normal((4, 2)), requires_grad=True)
    layer = md.nn.Linear(2, 3, dtype=np.float64, rng=0)
    assert md.gradcheck(lambda a, b: checkpoint(lambda p, q: layer((p @ q).tanh()), a, b), a, b)
    model = mlp(3)
    x, _ = batch(requires_grad=True)
    assert md.gradcheck(lambda x: checkpoint_sequential(model, 2, x).tanh(), x)
    # a tensor fn reads from its closure, not as an input: its gradient is checked too
    w = md.Tensor(rng.standard_normal((WIDTH, 2)), requires_grad=True)
    assert md.gradcheck(lambda w: checkpoint(lambda h: (h @ w).tanh(), x.detach()), w)


def test_saved_bytes_counts_what_the_graph_keeps_until_backward_frees_it():
    x = md.Tensor(np.ones((10, 10)), requires_grad=True)  # a leaf: not counted
    with saved_bytes() as saved:
        y = x.tanh()  # keeps x (a leaf) and its output y
        assert saved.current == y.data.nbytes
        loss = (y * y).sum()  # Mul keeps y twice, Sum keeps y * y
        assert saved.current == 2 * y.data.nbytes
        loss.backward()
    assert saved.current == 0 and saved.peak == 2 * y.data.nbytes


def train_step(model, x, y, segments):
    """Forward and backward; what the graph kept: (at the end of forward, peak)."""
    with saved_bytes() as saved:
        out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
        loss = cross_entropy(out, y)
        after_forward = saved.current
        loss.backward()
    assert saved.current == 0  # backward released everything
    return after_forward, saved.peak


def test_memory_every_layer_keeps_layer_inputs_and_sqrt_l_keeps_least():
    layers = 16
    model, (x, y) = mlp(layers), batch()
    activation = BATCH * WIDTH * 8
    plain_forward, plain_peak = train_step(model, x, y, None)
    # without checkpoints: each hidden layer's Linear output and activation
    tail = plain_forward - 2 * (layers - 1) * activation  # the logits and the loss's arrays
    assert tail > 0
    every_forward, every_peak = train_step(model, x, y, layers)
    assert every_forward == (layers - 1) * activation + tail  # the layers' inputs only
    root_forward, root_peak = train_step(model, x, y, 4)
    assert root_forward == 3 * activation + 6 * activation + tail  # 3 inputs, last segment's graph
    assert plain_peak > every_peak > root_peak
    assert root_peak <= 2 / np.sqrt(layers) * plain_peak  # Chen et al.: 2 sqrt(L) of L layers


def test_bad_input_is_named():
    x = md.Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        checkpoint(3, x)
    with pytest.raises(TypeError, match="at least one Tensor input.*ndarray of shape"):
        checkpoint(lambda a: md.Tensor(a), np.ones(3))
    with pytest.raises(TypeError, match="fn must return one Tensor, got tuple"):
        checkpoint(lambda a: (a, a), x)
    with pytest.raises(ValueError, match="segments must be an int >= 1"):
        checkpoint_sequential(mlp(2), 0, x)
    with pytest.raises(ValueError, match="4 segments for 3 modules"):
        checkpoint_sequential(mlp(2), 4, x)


def test_a_function_that_changes_between_runs_is_an_error():
    x = md.Tensor(np.ones(3), requires_grad=True)
    sizes = iter([3, 2])
    out = checkpoint(lambda a: a[:next(sizes)] * 2, x)
    with pytest.raises(RuntimeError, match="fn must compute the same thing"):
        out.sum().backward()
