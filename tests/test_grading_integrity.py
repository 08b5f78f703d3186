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
import itertools
import json

import numpy as np
import pytest
from student_kernel import both_ends, reached, same_verdict, verdict

import minidist as md
from minidist.course.trusted import free_names
from minidist.labkit import CheckFailed, blocked, expect_close, task, wire
from minidist.labkit.lab01 import (
    backward_of,
    check_backward_pass,
    check_optimizer,
    check_topological_order,
)
from minidist.labkit.lab02 import check_broadcast, check_ping_pong_traffic, check_ring_shift
from minidist.labkit.lab03 import check_allreduce
from minidist.labkit.relay import Lending
from minidist.labkit.remote import Remote

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

def fits_nothing(sizes, times):
    return None
'''


@pytest.fixture
def kernel():
    """A student's namespace, reached only through a Session over ``serve.answer``."""
    namespace: dict = {}
    exec(STUDENT, namespace)
    return reached(namespace)


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


@pytest.mark.parametrize("where", ["here", "in the kernel"])
def test_a_result_the_check_cannot_read_is_named_as_such_not_as_the_students_error(
        kernel, where):
    """A check unpacking a None where the task asks for (alpha, beta) raises in labkit's
    code; the student's code raised nothing, and the sentence says so."""
    from minidist.labkit.lab02 import check_fit_line

    fit = (lambda sizes, times: None) if where == "here" else kernel("fits_nothing")
    with pytest.raises(CheckFailed, match=r"^Task 0: what your code returned could not be "
                                          r"checked \(TypeError: .*NoneType"):
        with task("Task 0"):
            check_fit_line(fit, [1, 2], [3.0, 5.0], "two points")

    def misuses_the_checks_tools(sizes, times):  # labkit code raises, called by the student
        check_fit_line(None, [], [], "inside")

    with pytest.raises(CheckFailed, match=r"^Task 0: your code raised TypeError"):
        with task("Task 0"):
            check_fit_line(misuses_the_checks_tools, [1, 2], [3.0, 5.0], "two points")


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


# ---- multi-rank checks: the ranks are the grader's, the student's code is lent them -------

RANKS_STUDENT = '''
import numpy as np
from minidist.comm import chunk_bounds
from minidist.comm.collectives import basic

def ring_shift(arr, c):
    received = np.empty_like(arr)
    c.sendrecv(arr, (c.rank + 1) % c.size, received, (c.rank - 1) % c.size)
    return received

def ring_shift_deadlocks(arr, c):
    c.send(arr, (c.rank + 1) % c.size)
    return c.recv(np.empty_like(arr), (c.rank - 1) % c.size)

def ring_shift_into_arr(arr, c):
    c.sendrecv(arr.copy(), (c.rank + 1) % c.size, arr, (c.rank - 1) % c.size)
    return arr

def broadcast_library(arr, c, root=0):
    return basic.broadcast_binomial(arr, c, root)

def broadcast_forging_its_counters(arr, c, root=0):
    """Linear (P-1 rounds), then rewrites its counters and its log of calls to look like
    the text's binomial tree: the check reads the grader's own."""
    out = arr.copy()
    if c.rank == root:
        for dest in range(c.size):
            if dest != root:
                c.send(out, dest)
    else:
        c.recv(out, root)
    from minidist.labkit.lab02 import binomial_calls, log2_rounds
    c.stats.latencies.now = float(log2_rounds(c.size))
    if hasattr(c, "calls"):
        c.calls[:] = binomial_calls(c.size, root, c.rank, up=False)
    return out

def ping_pong(c, nbytes, repeats):
    import time
    buf, one_way = np.zeros(nbytes, np.uint8), []
    for _ in range(repeats):
        start = time.perf_counter()
        if c.rank == 0:
            c.send(buf, 1)
            c.recv(buf, 1)
        else:
            c.recv(buf, 0)
            c.send(buf, 0)
        one_way.append((time.perf_counter() - start) / 2)
    return float(np.median(one_way))

def ring_allreduce(x, c, op="sum"):
    p, me = c.size, c.rank
    bounds = chunk_bounds(len(x), p)
    incoming = c.scratch(max(hi - lo for lo, hi in bounds), x.dtype)
    for step in range(p - 1):
        s_lo, s_hi = bounds[(me - step) % p]
        r_lo, r_hi = bounds[(me - step - 1) % p]
        c.sendrecv(x[s_lo:s_hi], (me + 1) % p, incoming[:r_hi - r_lo], (me - 1) % p)
        c.combine(op, x[r_lo:r_hi], incoming[:r_hi - r_lo])
    for step in range(p - 1):
        s_lo, s_hi = bounds[(me + 1 - step) % p]
        r_lo, r_hi = bounds[(me - step) % p]
        c.sendrecv(x[s_lo:s_hi], (me + 1) % p, x[r_lo:r_hi], (me - 1) % p)
    return x

def ring_passing_the_whole_vector(x, c, op="sum"):
    """The right values, but every whole vector goes round the ring."""
    passing, incoming = x.copy(), np.empty_like(x)
    for _ in range(c.size - 1):
        c.sendrecv(passing, (c.rank + 1) % c.size, incoming, (c.rank - 1) % c.size)
        c.combine(op, x, incoming)
        passing[...] = incoming
    return x

def add_one(x):
    x += 1
    return x

def tail(x):
    return x[1:]

def copied(x):
    return x + 0

def short_message(c):
    """Rank 0 sends 3 values, rank 1 takes them into a buffer of 5 (``irecv_upto``)."""
    if c.rank == 0:
        c.send(np.arange(3.0), 1, 4)
        return None
    buf = np.full(5, -1.0)
    request = c.irecv_upto(buf, 0, 4)
    request.wait()
    return buf, request.received
'''


@pytest.fixture
def ranks_kernel():
    namespace: dict = {}
    exec(RANKS_STUDENT, namespace)
    return both_ends(namespace)


@pytest.mark.parametrize("answer", ["ring_shift", "ring_shift_deadlocks", "ring_shift_into_arr"])
def test_a_multi_rank_check_gives_the_local_verdict(ranks_kernel, answer):
    local = same_verdict(lambda get: check_ring_shift(get(answer), 4, 10, "int32"), ranks_kernel)
    assert (local == "passed") == (answer == "ring_shift")


@pytest.mark.parametrize("answer", ["ring_allreduce", "ring_passing_the_whole_vector"])
def test_an_allreduce_check_gives_the_local_verdict(ranks_kernel, answer):
    """In place (``x`` itself returned), reductions through ``c.combine``, views of ``x``
    as buffers: Lab 3's checks read the same through the grader's fabric."""
    local = same_verdict(lambda get: check_allreduce("ring", get(answer), 4, 10), ranks_kernel)
    assert (local == "passed") == (answer == "ring_allreduce")


def test_the_library_is_blocked_in_the_students_ranks(ranks_kernel):
    _, kernel = ranks_kernel
    assert "write your own broadcast_binomial" in verdict(
        lambda: check_broadcast(kernel("broadcast_library"), 5, 3, 0, "binomial"))


def test_counters_and_the_log_of_calls_are_the_graders(ranks_kernel):
    """In the student's interpreter the forged counters pass (why the ranks moved out);
    through the grader's fabric the same answer shows its P-1 rounds."""
    namespace, kernel = ranks_kernel
    forged = "broadcast_forging_its_counters"
    assert verdict(lambda: check_broadcast(namespace[forged], 5, 3, 0, "binomial")) == "passed"
    assert "took 4 rounds of message latency, a binomial tree" in verdict(
        lambda: check_broadcast(kernel(forged), 5, 3, 0, "binomial"))


def test_the_students_ranks_time_themselves_on_the_graders_clock(ranks_kernel):
    _, kernel = ranks_kernel
    assert verdict(lambda: check_ping_pong_traffic(kernel("ping_pong"), 1000, 5)) == "passed"


def test_arrays_keep_their_identity_across_a_call(ranks_kernel):
    _, kernel = ranks_kernel
    x = np.arange(4.0)
    assert kernel("add_one")(x) is x and list(x) == [1, 2, 3, 4]
    view = kernel("tail")(x)
    assert np.shares_memory(view, x) and list(view) == [2, 3, 4]
    assert not np.shares_memory(kernel("copied")(x), x)


def test_a_lent_communicator_takes_a_shorter_message(ranks_kernel):
    from minidist.labkit.ranks import run_ranks

    _, kernel = ranks_kernel
    results, stats = run_ranks(kernel("short_message"), 2, "short_message")
    buf, received = results[1]
    assert list(buf) == [0, 1, 2, -1, -1] and received == 24
    assert (stats[1].messages_recv, stats[1].bytes_recv) == (1, 24)  # counted by the grader


def test_only_what_was_lent_to_a_call_can_be_called_back():
    lending = Lending(itertools.count(1))
    c = md.comm.LocalCluster(1).communicators()[0]
    number = lending.lend(c)["$comm"][0]
    plain = lambda data: wire.decode(data, lending.resolve, frozenset({"$comm", "$request"}))  # noqa: E731
    for call in ({"task": 2, "on": number, "method": "barrier", "args": []},  # another task's
                 {"task": 1, "on": number + 1, "method": "barrier", "args": []},  # not lent
                 {"task": 1, "on": number, "method": "fabric", "args": []},  # not an operation
                 {"task": 1, "queued": [{"on": number, "method": "compute", "number": 5,
                                         "args": [0.0]}]}):  # a request number of its own
        with pytest.raises(wire.WireError):
            lending.answer(call, 1, plain)
    refused = lending.answer({"task": 1, "on": number, "method": "send",  # the transport's words
                              "args": [{"$dict": [["type", "list"]]}, 0, 0]}, 1, plain)
    assert refused["error"][0] == "ValueError" and refused["error"][1].endswith("got list")
