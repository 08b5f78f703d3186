"""The channel between a graded check and the student's kernel carries data only.

These tests run both ends in one process (``serve.answer`` as the channel):
they prove the protocol (what may cross, how tensors are mirrored, how a
student's exception comes back) and that Lab 1's checks give the same
verdicts on a ``Remote`` as on a local object. That the two ends are
different processes, so nothing the kernel does reaches the check, is
proved with real grading by the red-team class in ``test_course_kit.py``.
"""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest

import minidist as md
from minidist.course.trusted import free_names
from minidist.labkit import CheckFailed, blocked, expect_close, serve, task, wire
from minidist.labkit.lab01 import (
    backward_of,
    check_backward_pass,
    check_optimizer,
    check_topological_order,
)
from minidist.labkit.remote import Remote, Session

STUDENT = '''
import numpy as np
import minidist as md

def unbroadcast(grad, shape):
    return md.autograd.ops.unbroadcast(grad, shape)

def backward(root):
    root.backward()

topological_order = md.autograd.topological_order

class MomentumSGD:
    def __init__(self, params, lr, momentum=0.9, in_place=True):
        self.params, self.lr, self.momentum, self.in_place = list(params), lr, momentum, in_place
        self.velocity = [np.zeros_like(p.data) for p in self.params]

    def step(self):
        for p, v in zip(self.params, self.velocity):
            if p.grad is not None:
                v *= self.momentum
                v += p.grad
                if self.in_place:
                    p.data -= self.lr * v
                else:
                    p.data = p.data - self.lr * v

class ReLU(md.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.maximum(a, 0)

    @staticmethod
    def backward(ctx, grad):
        return grad * (ctx.saved_tensors[0] >= 0)  # wrong at 0

def shouts(x):
    raise ValueError("no " * 2000)
'''


@pytest.fixture
def kernel():
    """A student's namespace, reached only through a Session over ``serve.answer``."""
    namespace: dict = {}
    exec(STUDENT, namespace)
    serve.reset()
    session = Session(lambda text: serve.answer(text, namespace))
    return session.name


def test_a_call_sends_data_and_returns_data(kernel):
    g = np.arange(24.0).reshape(2, 3, 4)
    got = kernel("unbroadcast")(g, (3, 1))
    assert type(got) is np.ndarray and got.shape == (3, 1)
    expect_close("unbroadcast", got, g.sum(axis=(0, 2))[:, None])
    zero_d = kernel("unbroadcast")(g, ())
    assert zero_d.shape == () and np.asarray(getattr(zero_d, "data", zero_d)).shape == ()


def test_blocked_reaches_the_kernel(kernel):
    with pytest.raises(CheckFailed, match="write your own unbroadcast"):
        with task("Task 1"), blocked("minidist.autograd.ops.unbroadcast"):
            kernel("unbroadcast")(np.ones((2, 2)), (2,))


def test_a_students_exception_comes_back_by_name_and_message(kernel):
    with pytest.raises(CheckFailed, match="your code raised ValueError: no no") as failure:
        with task("Task 0"):
            kernel("shouts")(1)
    assert len(str(failure.value)) < 2100
    with pytest.raises(CheckFailed, match="NameError: name 'missing' is not defined"):
        with task("Task 0"):
            kernel("missing")(1)


def test_objects_that_are_not_data_stay_in_the_kernel(kernel):
    optimizer = kernel("MomentumSGD")([md.Tensor(np.ones(2))], lr=0.1)
    assert isinstance(optimizer, Remote) and isinstance(optimizer.step, Remote)
    with pytest.raises(TypeError):
        bool(optimizer)
    with pytest.raises(AttributeError):
        optimizer.__wrapped__  # noqa: B018 (dunder names are never sent to the kernel)


def test_graphs_and_in_place_updates_cross_as_on_one_side(kernel):
    x = md.Tensor(np.random.default_rng(0).standard_normal((2, 3)), requires_grad=True)
    h = (x @ md.Tensor(np.ones((3, 3)), requires_grad=True)).relu()
    check_topological_order(kernel("topological_order"), (h * h).sum() + h.sum(), "diamond")
    check_backward_pass(kernel("backward"), lambda a, c: (c * a + a * a * 2 + c).sum(),
                        [np.arange(4.0)], "frozen c", frozen=(np.ones(4),))
    sgd = kernel("MomentumSGD")
    check_optimizer(lambda ps: sgd(ps, lr=0.1), lambda ps: md.optim.SGD(ps, lr=0.1, momentum=0.9),
                    "in place")
    with pytest.raises(CheckFailed, match="replaced parameter 0's p.data by a new array"):
        check_optimizer(lambda ps: sgd(ps, lr=0.1, in_place=False),
                        lambda ps: md.optim.SGD(ps, lr=0.1, momentum=0.9), "a new array")


def test_a_probe_gives_the_local_verdict(kernel):
    relu = kernel("ReLU")
    (at_points,) = backward_of(relu, [-1.0, 0.0, 2.0], grad=[5.0, 5.0, 5.0])
    with pytest.raises(CheckFailed, match="differs at \\[1\\]"):
        expect_close("ReLU at -1, 0, 2", at_points, [0.0, 0.0, 5.0])


def _npy(array: np.ndarray, allow_pickle: bool = False) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return base64.b64encode(buffer.getvalue()).decode()


def test_the_wire_refuses_what_is_not_data():
    refuse = lambda data: wire.decode(data, lambda *_: None, frozenset())  # noqa: E731
    with pytest.raises(ValueError, match="Object arrays cannot be loaded"):
        refuse({"$array": _npy(np.array([object()]), allow_pickle=True)})
    for data in ({"$tensor": 1}, {"$ref": ["name", "os"]}, {"$class": "os:system"},
                 {"a": 1, "b": 2}, {"$pickle": "gASV"}):
        with pytest.raises(wire.WireError):
            refuse(data)
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(wire.WireError, match="deeper"):
        refuse(json.loads(json.dumps(deep)))
    with pytest.raises(wire.WireError, match="cannot be sent"):
        wire.encode(np.array([object()]), lambda _: None)
    with pytest.raises(wire.WireError):
        wire.loads("[1, 2]")


def test_the_grader_binds_only_the_names_a_check_reads_and_does_not_define():
    source = ("with task('T'), blocked('x'):\n    g = np.ones(3)\n"
              "    check(lambda ps: Adam(ps, lr=0.1), [f(v) for v in g])\n")
    assert free_names(source) == {"task", "blocked", "np", "check", "Adam", "f"}
