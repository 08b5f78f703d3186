"""Lab 7's checks give the same verdict on the student's functions seen from the grader.

As in ``test_grading_integrity.py``, both ends run in one process
(``serve.answer`` as the channel). A stage, a micro-batch's tensors and a
model are not data: each pipeline step runs through a probe that keeps the
stage in the student's kernel (``labkit/lab07_stages.py``), a schedule's
Steps cross as ``$step`` markers, and Tasks 4-5 build their MLP in the
kernel. Task 1's ranks, the log of whom each step sent to and received
from, and its bytes are the grader's, so a log or counters the student's
code rewrites change nothing there.
"""

from __future__ import annotations

import pytest
from student_kernel import both_ends, same_verdict, solution_namespace, verdict

from minidist.labkit.lab07 import check_1f1b, check_exchange, check_gpipe
from minidist.labkit.lab07_costs import check_bubble, check_checkpoint_memory, check_checkpointing
from minidist.util import chunk_bounds

WRONG = '''
def forward_sending_twice(c, stage, micro, x, shape):
    """Sends each activation twice, then hides the copy: drops it from the check's log
    of calls (when it holds one) and takes its bytes off the counters."""
    k, last = c.rank, c.size - 1
    if k == 0:
        inp = md.Tensor(x)
    else:
        buffer = np.empty(shape)
        c.recv(buffer, k - 1, tag=2 * micro + 1)
        c.recv(np.empty(shape), k - 1, tag=2 * micro + 1)
        inp = md.Tensor(buffer, requires_grad=True)
    out = stage(inp)
    if k < last:
        c.send(out.data, k + 1, tag=2 * micro + 1)
        c.send(out.data, k + 1, tag=2 * micro + 1)
        c.stats.bytes_sent -= out.data.nbytes
    if hasattr(c, "calls"):
        c.calls[:] = [call for i, call in enumerate(c.calls) if i == 0 or call != c.calls[i - 1]]
    return inp, out


def forward_returning_out(c, stage, micro, x, shape):
    return forward_step(c, stage, micro, x, shape)[1]


def gpipe_one_at_a_time(stages, micro_batches):
    return [[Step(k, m, phase) for m in range(micro_batches) for phase in "FB"]
            for k in range(stages)]


def backward_as_if_a_rank_before(c, micro, inp, out):
    """The last rank sends its input's gradient back, as if it had a rank before it."""
    if c.rank == c.size - 1:
        out.backward()
        c.send(inp.grad, c.rank - 1, tag=2 * micro + 2)
    else:
        backward_step(c, micro, inp, out)


def keeps_everything(modules, segments, x):
    for module in modules:
        x = module(x)
    return x
'''

CHECKS = {
    "exchange": lambda get: (
        check_exchange(get("forward_step"), get("backward_step"), 4, 5, 11, "1f1b", seed=11),
        check_exchange(get("forward_step"), get("backward_step"), 3, 3, order="shuffled")),
    "exchange_returning_out": lambda get: check_exchange(
        get("forward_returning_out"), get("backward_step"), 2, 2),
    "exchange_alone": lambda get: check_exchange(get("forward_step"),
                                                 get("backward_as_if_a_rank_before"), 1, 2),
    "gpipe": lambda get: check_gpipe(get("gpipe"), 3, 5, batch=11, seed=23),
    "gpipe_one_at_a_time": lambda get: check_gpipe(get("gpipe_one_at_a_time"), 2, 4),
    "one_f_one_b": lambda get: check_1f1b(get("one_f_one_b"), 4, 8, batch=16, seed=31),
    "bubble": lambda get: check_bubble(get("timed_pipeline"), get("bubbles"), 3, 4,
                                       schedule="naive", forward_s=2e-3, backward_s=3e-3),
    "checkpoint": lambda get: check_checkpointing(get("checkpoint_segments"), 6, 5, batch=7),
    "keeps_everything": lambda get: check_checkpointing(get("keeps_everything"), 4, 2),
}


@pytest.fixture(scope="module")
def kernel():
    return both_ends(solution_namespace("lab07_pipelines", WRONG))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", sorted(CHECKS))
def test_each_check_gives_the_local_verdict(kernel, answer):
    local = same_verdict(CHECKS[answer], kernel)
    assert (local == "passed") == (answer in ("exchange", "gpipe", "one_f_one_b", "bubble",
                                              "checkpoint"))


@pytest.mark.timeout(120)
def test_the_log_and_the_bytes_are_the_graders(kernel):
    """A copy of each activation hidden from the log and the counters passes in the
    student's own interpreter; the grader's log shows it."""
    namespace, remote = kernel
    forged = lambda get: check_exchange(get("forward_sending_twice"),  # noqa: E731
                                        get("backward_step"), 3, 4, order="1f1b")
    assert verdict(lambda: forged(namespace.__getitem__)) == "passed"
    assert ("forward_step of micro-batch 0 on rank 0 posted [send to rank 1 (tag 1), send to "
            "rank 1 (tag 1)]") in verdict(lambda: forged(remote))


@pytest.mark.timeout(120)
def test_checkpointing_memory_is_the_processs_not_the_kernels_word(kernel, monkeypatch):
    """An answer that keeps every activation, with the probe patched to report no saved
    bytes and the forward calls of checkpoints (in a graded kernel the student's code may do
    that): the saved-bytes check believes it, the resident memory the operating system
    counts does not, both ways."""
    from minidist.labkit import lab07_costs

    honest = lab07_costs.checkpointed_answer

    def forged(checkpoint_segments, segments, sizes, batch, seed):
        loss, grads, _, calls = honest(checkpoint_segments, segments, sizes, batch, seed)
        last = chunk_bounds(len(calls), segments)[-1][0]  # and the forwards checkpoints run
        return loss, grads, 0, [2 if i < last else 1 for i in range(len(calls))]

    # as the kernel finds it: the module's name for the probe
    forged.__module__, forged.__qualname__ = lab07_costs.__name__, "checkpointed_answer"
    monkeypatch.setattr(lab07_costs, "checkpointed_answer", forged)
    assert same_verdict(lambda get: check_checkpointing(get("keeps_everything"), 4, 2),
                        kernel) == "passed"
    namespace, remote = kernel
    for get in (namespace.__getitem__, remote):  # the figures it measures differ run to run
        failure = verdict(lambda get=get: check_checkpoint_memory(get("keeps_everything")))
        assert "as the operating system counts it" in failure
    assert same_verdict(lambda get: check_checkpoint_memory(get("checkpoint_segments")),
                        kernel) == "passed"



@pytest.mark.timeout(120)
def test_a_message_to_a_rank_that_does_not_exist_is_named_alike(kernel):
    assert "posted a send to rank -1 (tag 4), but rank 0 has no rank before it" in (
        same_verdict(CHECKS["exchange_alone"], kernel))
