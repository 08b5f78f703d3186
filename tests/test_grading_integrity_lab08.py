"""Lab 8's checks give the same verdict on the student's functions seen from the grader.

As in ``test_grading_integrity.py``, both ends run in one process
(``serve.answer`` as the channel). A Function, a layer and an optimiser are
not data: each rank drives them phase by phase through probes
(``labkit/lab08_ranks.py``) on a communicator the grader lends again to
every phase, so the one a Function's forward or an optimiser kept still
reaches its rank in a later phase; each phase's traffic is counted on the
grader's fabric, out of reach of counters the student's code rewrites.
"""

from __future__ import annotations

import pytest
from student_kernel import both_ends, same_verdict, solution_namespace, verdict

from minidist.labkit.lab08 import check_f_and_g, check_mlp_split
from minidist.labkit.lab08_moe import check_dispatch, check_moe_layer
from minidist.labkit.lab08_zero import check_zero_memory, check_zero_shape_error, check_zero_step

WRONG = '''
class ForgingSum(Function):
    """Measures one allreduce, sends its partial output to every rank instead (the right
    sum, other traffic), then writes the measured counts into its counters."""

    @staticmethod
    def forward(ctx, partial, c):
        start = (c.stats.messages_sent, c.stats.bytes_sent)
        comm.allreduce(np.zeros_like(partial), c, check=False)
        wanted = (c.stats.messages_sent - start[0], c.stats.bytes_sent - start[1])
        total = partial.copy()
        for peer in range(c.size):
            if peer != c.rank:
                c.send(partial, peer)
        for peer in range(c.size):
            if peer != c.rank:
                total += c.recv(np.empty_like(partial), peer)
        c.stats.messages_sent, c.stats.bytes_sent = start[0] + wanted[0], start[1] + wanted[1]
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class NoSum(Function):
    @staticmethod
    def forward(ctx, partial, c):
        return partial

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class WholeStateZeRO(MyZeRO):
    """The right step, also keeping two moments of the whole vector (in a graded kernel it
    may patch the probe that counts its arrays)."""

    def step(self):
        if not hasattr(self, "moments"):
            self.moments = (np.zeros_like(self.flat), np.zeros_like(self.flat))
        for moment in self.moments:
            moment += 1.0
        super().step()


class KeepsViews(MyParallelMLP):
    """The right slices, kept as views of the whole weights it was given."""

    def __init__(self, w1, b1, w2, b2, c, activation="relu"):
        Module.__init__(self)
        hidden = slice_of(w1.shape[0], c, "hidden units")
        self.c, self.activation = c, activation
        self.w1, self.b1 = Parameter(w1[hidden]), Parameter(b1[hidden])
        self.w2, self.b2 = Parameter(w2[:, hidden]), Parameter(b2)


def float_table(rows, expert_counts, c):
    received, table = dispatch(rows, expert_counts, c)
    return received, table.astype(np.float64)


def int_send_back(outputs, table, c):
    return send_back(outputs, table.astype(np.int64), c)


class LibraryZeRO(ShardedOptimizer):
    def step(self):
        super().step()
'''

CHECKS = {
    "f_and_g": lambda get: check_f_and_g(get("MyCopyToRanks"), get("MySumOverRanks"), 4,
                                         (2, 3, 4), seed=11),
    "no_sum": lambda get: check_f_and_g(get("MyCopyToRanks"), get("NoSum"), 2, (3, 4)),
    "mlp_split": lambda get: check_mlp_split(get("MyParallelMLP"), 2, 6, 16, (2, 2, 3),
                                             "tanh", seed=23),
    "dispatch": lambda get: check_dispatch(get("dispatch"), get("send_back"), 4, 8, seed=31),
    "moe_layer": lambda get: check_moe_layer(get("dispatch"), get("send_back"), 3, 3, 2,
                                             seed=35),
    "zero_step": lambda get: check_zero_step(get("MyZeRO"), 4, 2, "adam", [5, 6, 4], seed=43),
    "library_zero": lambda get: check_zero_step(get("LibraryZeRO"), 2, 1, "sgd", [4, 7, 3]),
    "zero_float32": lambda get: check_zero_step(get("MyZeRO"), 2, 2, "adam", [4, 7, 3],
                                                dtype="float32"),
    "zero_unused": lambda get: check_zero_step(get("MyZeRO"), 3, 1, "sgd", [4, 7, 3], unused=3),
    "zero_shape": lambda get: check_zero_shape_error(get("MyZeRO"), 2, 1, [4, 7, 3], 0),
    "keeps_views": lambda get: check_mlp_split(get("KeepsViews"), 2, 4, 8, (5,)),
    "float_table": lambda get: check_dispatch(get("float_table"), get("int_send_back"), 2, 4),
}
FAILING = ("no_sum", "library_zero", "keeps_views", "float_table")


@pytest.fixture(scope="module")
def kernel():
    return both_ends(solution_namespace("lab08_model_parallel", WRONG))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", sorted(CHECKS))
def test_each_check_gives_the_local_verdict(kernel, answer):
    local = same_verdict(CHECKS[answer], kernel)
    assert (local == "passed") == (answer not in FAILING)


@pytest.mark.timeout(120)
def test_the_traffic_of_each_phase_is_counted_on_the_graders_fabric(kernel):
    namespace, remote = kernel
    forged = lambda get: check_f_and_g(get("MyCopyToRanks"), get("ForgingSum"),  # noqa: E731
                                       3, (5,), seed=1)
    assert verdict(lambda: forged(namespace.__getitem__)) == "passed"
    assert "g's forward sends one allreduce of the partial output" in verdict(
        lambda: forged(remote))


@pytest.mark.timeout(120)
def test_zeros_memory_is_the_processs_not_the_kernels_word(kernel, monkeypatch):
    """Two moments of the whole vector kept on every rank, with the probe patched to leave
    them out of the bytes kept: the bytes-kept check believes it, the resident memory the
    operating system counts does not, both ways."""
    from minidist.labkit import lab08_ranks, lab08_zero

    honest = lab08_ranks.zero_results

    def forged(bench):
        result = honest(bench)
        return dict(result, kept=result["kept"] - 2 * bench.zero.flat.nbytes)

    # as the kernel finds it: the module's name for the probe
    forged.__module__, forged.__qualname__ = lab08_ranks.__name__, "zero_results"
    monkeypatch.setattr(lab08_ranks, "zero_results", forged)
    monkeypatch.setattr(lab08_zero, "zero_results", forged)  # the check's own name for it
    assert same_verdict(lambda get: check_zero_step(get("WholeStateZeRO"), 2, 1, "adam",
                                                    [4, 7, 3]), kernel) == "passed"
    namespace, remote = kernel
    for get in (namespace.__getitem__, remote):  # the figures it measures differ run to run
        failure = verdict(lambda get=get: check_zero_memory(get("WholeStateZeRO")))
        assert "as the operating system counts it" in failure
    assert same_verdict(lambda get: check_zero_memory(get("MyZeRO")), kernel) == "passed"

