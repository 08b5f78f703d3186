"""Lab 1's checks, run on the library's reference code, one pytest marker per task.

``pytest -m lab01_adam`` runs the check that grades Task 10 against
``md.optim.Adam``: the notebook and the library are held to the same checks.
The answers themselves are the library's code: ``test_lab01_code.py`` holds
the two texts together. Also: the labkit's own behaviour (sentences,
``blocked``, the checks' own failures).
"""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist.labkit import (
    BlockedError,
    CheckFailed,
    blocked,
    check_backward,
    expect,
    expect_close,
    task,
)
from minidist.labkit.lab01 import (
    backward_of,
    check_backward_pass,
    check_optimizer,
    check_topological_order,
    check_training,
    check_unbroadcast,
)

rng = np.random.default_rng(0)


@pytest.mark.lab01_unbroadcast
def test_unbroadcast():
    g = rng.standard_normal((3, 2, 5, 4))
    check_unbroadcast(md.autograd.unbroadcast, g, {(5, 1): g.sum(axis=(0, 1, 3))[:, None],
                                                   (): g.sum(), (3, 2, 5, 4): g}, "unbroadcast")


def test_the_unbroadcast_check_fails_an_answer_that_changes_its_input():
    """The check computes its expected values before the first call: an answer that clears
    grad (and returns zeros) once passed, its expected values cleared with it."""
    def clears(grad, shape):
        grad[...] = 0
        return np.zeros(shape)

    def clears_after_summing(grad, shape):
        reduced = md.autograd.unbroadcast(grad, shape).copy()
        grad[...] = 0
        return reduced

    g = np.arange(24.0).reshape(2, 3, 4)
    with pytest.raises(CheckFailed, match="unbroadcast to \\(3, 4\\)"):
        check_unbroadcast(clears, g.copy(), {(3, 4): g.sum(axis=0)}, "unbroadcast")
    with pytest.raises(CheckFailed, match="changed its input grad"):
        check_unbroadcast(clears_after_summing, g.copy(), {(3, 4): g.sum(axis=0)}, "unbroadcast")


@pytest.mark.lab01_backward_mul
def test_mul_backward():
    check_backward(md.autograd.Mul, rng.standard_normal((2, 1, 3)), rng.standard_normal((5, 1)),
                   what="Mul")


@pytest.mark.lab01_backward_matmul
def test_matmul_backward():
    check_backward(md.autograd.MatMul, rng.standard_normal((2, 1, 3, 4)),
                   rng.standard_normal((3, 4, 2)), what="MatMul")


@pytest.mark.lab01_backward_sum
def test_sum_backward():
    check_backward(md.autograd.Sum, rng.standard_normal((2, 3, 4)), axis=(0, 2), what="Sum")


@pytest.mark.lab01_backward_relu
def test_relu_backward():
    check_backward(md.autograd.ReLU, rng.standard_normal((4, 5)), what="ReLU")
    (at_points,) = backward_of(md.autograd.ReLU, [-1.0, 0.0, 2.0], grad=[5.0, 5.0, 5.0])
    expect_close("ReLU at -1, 0, 2", at_points, [0.0, 0.0, 5.0])


@pytest.mark.lab01_backward_log_softmax
def test_log_softmax_backward():
    check_backward(md.autograd.LogSoftmax, rng.standard_normal((4, 3)), axis=0, what="LogSoftmax")


@pytest.mark.lab01_topological_order
def test_topological_order():
    x = md.Tensor(rng.standard_normal((2, 3)), requires_grad=True)
    h = (x @ md.Tensor(rng.standard_normal((3, 3)), requires_grad=True)).relu()
    check_topological_order(md.autograd.topological_order, (h * h).sum() + h.sum(), "diamond")


@pytest.mark.lab01_backward_pass
def test_backward_pass():
    check_backward_pass(lambda root: root.backward(), lambda a: (a * a * a).sum(),
                        [rng.standard_normal(4)], "(a * a * a).sum()")
    check_backward_pass(lambda root: root.backward(), lambda a, c: (c * a + a * a * 2 + c).sum(),
                        [rng.standard_normal(4)], "with a frozen c", frozen=(np.ones(4),))


def _sgd_reference(params, lr, momentum):
    """SGD with momentum written out: v = mu v + g, w -= lr v."""
    class Reference:
        velocity = [np.zeros_like(p.data) for p in params]

        def step(self):
            for p, v in zip(params, self.velocity, strict=True):
                if p.grad is not None:
                    v *= momentum
                    v += p.grad
                    p.data -= lr * v
    return Reference()


def _adam_reference(params, lr, betas, eps):
    """Adam written out from Kingma & Ba, with bias correction."""
    class Reference:
        m = [np.zeros_like(p.data) for p in params]
        s = [np.zeros_like(p.data) for p in params]
        t = 0

        def step(self):
            self.t += 1
            for p, m, s in zip(params, self.m, self.s, strict=True):
                if p.grad is not None:
                    m[:] = betas[0] * m + (1 - betas[0]) * p.grad
                    s[:] = betas[1] * s + (1 - betas[1]) * p.grad ** 2
                    m_hat, s_hat = m / (1 - betas[0] ** self.t), s / (1 - betas[1] ** self.t)
                    p.data -= lr * m_hat / (np.sqrt(s_hat) + eps)
    return Reference()


@pytest.mark.lab01_sgd_momentum
def test_sgd_momentum():
    check_optimizer(lambda ps: md.optim.SGD(ps, lr=0.03, momentum=0.5),
                    lambda ps: _sgd_reference(ps, 0.03, 0.5), "SGD", steps=6)


@pytest.mark.lab01_adam
def test_adam():
    check_optimizer(lambda ps: md.optim.Adam(ps, lr=0.1, betas=(0.5, 0.9), eps=1e-3),
                    lambda ps: _adam_reference(ps, 0.1, (0.5, 0.9), 1e-3), "Adam", steps=6)


def train_digits(train):
    """The solution's answer to Task 11."""
    md.nn.manual_seed(0)
    model = md.nn.MLP([64, 64, 10])
    optimizer = md.optim.Adam(model.parameters(), lr=1e-2)
    order = np.random.default_rng(0)
    for _ in range(10):
        for batch in np.array_split(order.permutation(len(train)), len(train) // 64):
            loss = md.nn.functional.cross_entropy(model(md.Tensor(train.x[batch])),
                                                  train.y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


@pytest.mark.lab01_train_mlp
def test_train_mlp_reaches_ninety_percent():
    train, test = md.data.load_digits(test_fraction=0.3, seed=5)
    assert check_training(train_digits, train, test, "MLP") >= 0.9


def test_training_check_names_each_claim():
    train, test = md.data.load_digits()
    cases = [(lambda data: None, "the function returned NoneType, not a model"),
             (lambda data: lambda x: x, r"the model maps 2 images to an output of shape "
                                        r"\(2, 64\), expected \(2, 10\)"),
             (lambda data: md.nn.MLP([64, 10], rng=0), r"test accuracy .*, needs at least 90%")]
    for train_fn, message in cases:
        with pytest.raises(CheckFailed, match=f"^digits: {message}"):
            check_training(train_fn, train, test, "digits")


def test_optimizer_check_wants_updates_in_place():
    class Replacing:
        def __init__(self, params):
            self.params = params

        def step(self):
            for p in self.params:
                if p.grad is not None:
                    p.data = p.data - 0.1 * p.grad

    with pytest.raises(CheckFailed, match=r"step 1 replaced parameter 0's p.data by a new array"):
        check_optimizer(Replacing, lambda ps: md.optim.SGD(ps, lr=0.1), "SGD")


def test_failures_read_as_one_sentence():
    with pytest.raises(CheckFailed, match=r"^v: differs at \[1, 2\]: got 5, expected 0 "):
        expect_close("v", np.arange(6.0).reshape(2, 3) * (np.arange(6) == 5).reshape(2, 3),
                     np.zeros((2, 3)))
    with pytest.raises(CheckFailed, match=r"got 1.1478122, expected 1.1478123 \(1 of 1 values "
                                          r"wrong; your values are float32, the expected float64"):
        expect_close("f32", np.float32([1.1478123]), [1.1478123456789], 1e-10, 1e-12)
    with pytest.raises(CheckFailed, match=r"got 0.06286510001, expected 0.0628651 "):
        expect_close("tight", [0.0628651 + 1e-11], [0.0628651], 1e-10, 1e-12)
    with pytest.raises(CheckFailed, match=r"^Task X: not done yet"):
        with task("Task X"):
            raise NotImplementedError()
    with pytest.raises(CheckFailed, match=r"^Task Y: the check's own sentence$"):
        with task("Task Y"):
            expect(False, "the check's own sentence")
    message = r"^WrongMul: input 1 gradient: differs at \[0\]: got [-0-9.]+, expected "
    with pytest.raises(CheckFailed, match=message):
        class WrongMul(md.autograd.Mul):
            @staticmethod
            def backward(ctx, grad):
                a, b = ctx.saved_tensors
                return grad * b, grad * b
        check_backward(WrongMul, np.ones(3) * 2, np.ones(3) * 3, what="WrongMul")


def test_blocked_reaches_aliases_and_restores():
    from minidist.autograd.ops import unbroadcast as alias

    with blocked("minidist.autograd.ops.unbroadcast", "minidist.optim.adam.Adam.update"):
        with pytest.raises(BlockedError, match="write your own unbroadcast"):
            alias(np.ones((2, 3)), (3,))
        with pytest.raises(BlockedError, match="write your own Adam.update"):
            p = md.Tensor(np.ones(2), requires_grad=True)
            p.grad = np.ones(2)
            md.optim.Adam([p]).step()
    np.testing.assert_array_equal(alias(np.ones((2, 3)), (3,)), np.full(3, 2.0))
