"""Every autograd op against finite differences, with broadcasting and random shapes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidist as md
from minidist.autograd import gradcheck

rng = np.random.default_rng(0)


def tensor(*shape, positive=False, low=-1.0):
    data = rng.uniform(0.5, 2.0, shape) if positive else rng.uniform(low, 1.0, shape)
    return md.Tensor(data, requires_grad=True)


# --- shapes that broadcast: hypothesis draws a shape and squeezes some axes to 1 / drops some
@st.composite
def broadcast_pair(draw):
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    other = list(shape)
    for i in range(ndim):
        if draw(st.booleans()):
            other[i] = 1
    drop = draw(st.integers(0, ndim))
    return shape, tuple(other[drop:])


BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@settings(max_examples=25, deadline=None)
@given(shapes=broadcast_pair(), swap=st.booleans())
def test_binary_ops_broadcast(name, shapes, swap):
    sa, sb = shapes[::-1] if swap else shapes
    positive = name in ("div", "pow")
    assert gradcheck(BINARY[name], tensor(*sa, positive=positive), tensor(*sb, positive=positive))


@pytest.mark.parametrize("name,fn,positive", [
    ("neg", lambda a: -a, False),
    ("exp", lambda a: a.exp(), False),
    ("log", lambda a: a.log(), True),
    ("tanh", lambda a: a.tanh(), False),
    ("sigmoid", lambda a: a.sigmoid(), False),
    ("relu", lambda a: a.relu(), False),
    ("pow_scalar", lambda a: a ** 3, False),
    ("sqrt", lambda a: a ** 0.5, True),
    ("scalar_ops", lambda a: 2 - 3 * a / 4 + 1 / (a + 3), True),
])
@settings(max_examples=10, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3))
def test_unary_ops(name, fn, positive, shape):
    x = tensor(*shape, positive=positive)
    if name == "relu":  # keep away from the kink, where the derivative is undefined
        x.data[np.abs(x.data) < 1e-3] = 0.5
    assert gradcheck(fn, x)


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_reductions(shape, data):
    x = tensor(*shape)
    axes = [None, *range(-len(shape), len(shape))]
    if len(shape) > 1:
        axes.append((0, len(shape) - 1))
    axis = data.draw(st.sampled_from(axes))
    keepdims = data.draw(st.booleans())
    assert gradcheck(lambda a: a.sum(axis=axis, keepdims=keepdims), x)
    assert gradcheck(lambda a: a.mean(axis=axis, keepdims=keepdims), x)
    assert gradcheck(lambda a: a.max(axis=axis, keepdims=keepdims), x)
    assert gradcheck(lambda a: a.log_softmax(axis=-1), x)


def test_max_shares_gradient_between_ties():
    x = md.Tensor(np.array([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]]), requires_grad=True)
    x.max(axis=1).sum().backward()
    np.testing.assert_allclose(x.grad, [[0, 0.5, 0.5], [1, 0, 0]])


@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
])
def test_matmul_batched_and_vectors(sa, sb):
    assert gradcheck(lambda a, b: a @ b, tensor(*sa), tensor(*sb))


def test_matmul_with_constant_operand():
    w, constant = tensor(4, 3), md.Tensor(rng.standard_normal((2, 4)))  # no gradient wanted
    assert gradcheck(lambda b: constant @ b, w)


@pytest.mark.parametrize("fn", [
    lambda a: a.reshape(6, 4),
    lambda a: a.reshape(-1),
    lambda a: a.transpose(),
    lambda a: a.transpose(1, 0, 2),
    lambda a: a.transpose(0, -1, 1),  # negative axes count from the end
    lambda a: a.transpose(-1, -3, -2),
    lambda a: a.T,
    lambda a: a[1],
    lambda a: a[:, 1:3, ::2],
    lambda a: a[..., 0],
    lambda a: a[np.array([0, 2, 0, 0])],
    lambda a: a[np.array([0, 1]), np.array([2, 2])],
    lambda a: a[a.data > 0],
])
def test_shape_ops(fn):
    assert gradcheck(fn, tensor(3, 4, 2))


def test_embedding_gather_accumulates_repeated_rows():
    table = md.Tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    ids = np.array([1, 3, 1, 1])
    rows = table[ids]
    np.testing.assert_array_equal(rows.data, table.data[ids])
    rows.sum().backward()
    np.testing.assert_array_equal(table.grad[:, 0], [0, 3, 0, 1])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate_and_stack(axis):
    a, b, c = tensor(2, 3), tensor(2, 3), tensor(2, 3)
    assert gradcheck(lambda x, y, z: md.concatenate([x, y, z], axis=axis) * 2, a, b, c)
    assert gradcheck(lambda x, y, z: md.stack([x, y, z], axis=axis).tanh(), a, b, c)


def test_gradient_accumulates_over_uses_and_calls():
    x = md.Tensor(np.array([2.0, -1.0]), requires_grad=True)
    (x * x + x).sum().backward()
    np.testing.assert_allclose(x.grad, 2 * x.data + 1)
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad, 2 * x.data + 4)
    x.zero_grad()
    assert x.grad is None


def test_diamond_graph_visits_each_node_once():
    x = tensor(3)
    h = x.exp()
    y = (h * h + h.tanh() * h).sum()
    assert gradcheck(lambda a: (a.exp() * a.exp() + a.exp().tanh() * a.exp()).sum(), x)
    y.backward()
    e = np.exp(x.data)
    expected = 2 * e * e + (1 - np.tanh(e) ** 2) * e * e + np.tanh(e) * e
    np.testing.assert_allclose(x.grad, expected)


def test_no_grad_and_detach_record_nothing():
    x = tensor(3)
    with md.no_grad():
        y = x * 2
    assert not y.requires_grad
    z = x.detach() * 2
    assert not z.requires_grad and z._ctx is None


def test_backward_errors_are_clear():
    x = tensor(3)
    with pytest.raises(RuntimeError, match="non-scalar tensor of shape \\(3,\\)"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        md.Tensor(np.ones(2)).sum().backward()
    with pytest.raises(TypeError, match="floating-point"):
        md.Tensor(np.arange(3), requires_grad=True)
    y = (x * 2).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="already freed"):
        y.backward()


def test_backward_with_explicit_gradient_and_retain_graph():
    x = tensor(2, 2)
    y = x * 3
    y.backward(np.ones((2, 2)), retain_graph=True)
    y.backward(np.ones((2, 2)))
    np.testing.assert_allclose(x.grad, 6 * np.ones((2, 2)))
    seed = np.ones((2, 2))
    x.backward(seed)  # a leaf keeps a copy, never the caller's array
    x.grad += 1
    np.testing.assert_array_equal(seed, np.ones((2, 2)))


def test_a_rule_returning_too_few_gradients_is_an_error_naming_it():
    class HalfMul(md.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, grad):
            return grad  # one gradient for two inputs

    with pytest.raises(RuntimeError, match=r"HalfMul.backward returned 1 gradient\(s\) for 2 "):
        HalfMul.apply(tensor(3), tensor(3)).sum().backward()


def test_requires_grad_set_after_the_forward_gives_no_gradient():
    w, x = tensor(3), md.Tensor(np.ones(3))
    y = (x * w + x).sum()
    x.requires_grad_()  # too late for this graph: it gets no gradient from it
    y.backward()
    assert x.grad is None
    np.testing.assert_array_equal(w.grad, np.ones(3))


def test_float32_stays_float32():
    x = md.Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = ((x * 0.5 + 1.0) / 2.0) ** 2
    y = (y @ md.Tensor(np.ones((3, 1), np.float32))).log_softmax(axis=0).sum()
    assert y.dtype == np.float32
    y.backward()
    assert x.grad.dtype == np.float32


def test_a_leafs_gradient_has_the_leafs_dtype():
    xp = md.backend.xp()  # the seeds on the tensors' device (the strict tier's too)
    x = md.Tensor(np.ones(3, np.float32), requires_grad=True)
    x.backward(xp.ones(3))  # a float64 seed
    assert x.grad.dtype == np.float32
    y = md.Tensor(np.ones(3), requires_grad=True)
    y.backward(xp.ones(3, dtype=np.int64))
    (y * 2).sum().backward()  # adds float64 into it
    np.testing.assert_array_equal(y.grad, [3.0, 3.0, 3.0])


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_an_axis_given_as_a_numpy_integer_reduces_as_an_int(reduce):
    x = md.Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    getattr(x, reduce)(axis=np.int64(1)).sum().backward()
    expected = md.Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    getattr(expected, reduce)(axis=1).sum().backward()
    np.testing.assert_array_equal(x.grad, expected.grad)


def test_gradcheck_nudges_an_input_that_is_not_in_c_order():
    x = md.Tensor(np.random.default_rng(0).standard_normal((3, 4)).T, requires_grad=True)
    assert gradcheck(lambda t: (t * t).sum(), x)


def test_gradcheck_reports_a_wrong_backward():
    class WrongSquare(md.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, grad):
            (a,) = ctx.saved_tensors
            return grad * a  # missing the factor 2

    with pytest.raises(AssertionError, match="input 0 at index \\(0,\\)"):
        gradcheck(lambda a: WrongSquare.apply(a), tensor(3))


def test_leaf_gradients_never_share_memory():
    a, b = tensor(2, 3), tensor(2, 3)
    (a.reshape(3, 2).reshape(2, 3) + b + a.sum()).sum().backward()
    before = b.grad.copy()
    a.grad *= 0  # writeable, and b's gradient does not change with it: no shared memory
    np.testing.assert_array_equal(b.grad, before)


def test_grad_hooks_fire_once_per_leaf_last_layer_first():
    rng_ = np.random.default_rng(3)
    layers = [(tensor(4, 4), tensor(4)) for _ in range(3)]
    finished = []
    for k, (w, b) in enumerate(layers):
        w.register_grad_hook(lambda t, k=k: finished.append(("w", k, t.grad is not None)))
        b.register_grad_hook(lambda t, k=k: finished.append(("b", k, t.grad is not None)))
    h = md.Tensor(rng_.standard_normal((5, 4)))
    for w, b in layers:
        h = (h @ w.T + b).tanh() + h * 0.5  # a residual use: h is consumed twice
    h.sum().backward()
    assert sorted(finished) == sorted((n, k, True) for k in range(3) for n in "wb")
    layer_order = [k for _, k, _ in finished]
    assert layer_order == sorted(layer_order, reverse=True), finished


def test_queue_callback_runs_after_every_gradient():
    x = tensor(3)
    seen = []
    x.register_grad_hook(lambda t: md.autograd.queue_callback(lambda: seen.append(t.grad.copy())))
    (x * 2).sum().backward()
    np.testing.assert_array_equal(seen[0], [2, 2, 2])
    with pytest.raises(RuntimeError, match="only valid while backward"):
        md.autograd.queue_callback(lambda: None)


def test_backward_of_a_leaf_and_of_an_unused_input():
    x, unused = tensor(), tensor(3)
    x.backward()
    assert x.grad == 1.0
    y = x * 2
    z = md.stack([y, y])  # unused never enters the graph
    z.sum().backward()
    assert x.grad == 5.0 and unused.grad is None
