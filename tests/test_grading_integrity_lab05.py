"""Lab 5's checks give the same verdict on the solution's functions seen from the grader.

As in ``test_grading_integrity.py``, both ends run in one process
(``serve.answer`` as the channel). A batch of records and a GloVe model are
not data: they cross as their arrays and are rebuilt by a probe on the
student's side; Task 4's ranks and their traffic are the grader's, so
counters the student's code rewrites change nothing there.
"""

from __future__ import annotations

import pytest
from student_kernel import both_ends, solution_namespace, verdict

from minidist.labkit.lab05 import (
    check_adagrad,
    check_hogwild,
    check_loss_gradients,
    check_sharded_dots,
    check_weighting,
)

FORGER = '''
def sharded_dots_forging_its_counters(c, word, context, row, col):
    """Measures one allreduce of B numbers, sends its partial products to every rank
    instead (the right values, other traffic), then writes the measured counts."""
    start = (c.stats.messages_sent, c.stats.bytes_sent)
    comm.allreduce(np.zeros(len(row)), c)
    wanted = (c.stats.messages_sent - start[0], c.stats.bytes_sent - start[1])
    total = np.einsum("bk,bk->b", word[row], context[col])
    for peer in range(c.size):
        if peer != c.rank:
            c.send(np.einsum("bk,bk->b", word[row], context[col]), peer)
    for peer in range(c.size):
        if peer != c.rank:
            total += c.recv(np.empty(len(row)), peer)
    c.stats.messages_sent, c.stats.bytes_sent = start[0] + wanted[0], start[1] + wanted[1]
    return total
'''

CHECKS = {
    "weighting": lambda f: check_weighting(f, [[2.0, 5.0], [10.0, 20.0]], x_max=10.0),
    "loss_and_gradients": lambda f: check_loss_gradients(f, 5, 3, 8),
    "adagrad_step": lambda f: check_adagrad(f, 4, 2, 4, eta=0.2, seed=1),
    "sharded_dots": lambda f: check_sharded_dots(f, 3, 5, 7, 9, seed=1),
    "sharded_dots_forging_its_counters": lambda f: check_sharded_dots(f, 2, 9, 6, 10),
    "hogwild_vs_sequential": lambda f: check_hogwild(f, 1, 100, 4, 1000, 1, 64),
}


@pytest.fixture(scope="module")
def kernel():
    return both_ends(solution_namespace("lab05_glove", FORGER))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", sorted(set(CHECKS) - {"sharded_dots_forging_its_counters"}))
def test_each_check_gives_the_local_verdict(kernel, answer):
    namespace, remote = kernel
    assert verdict(lambda: CHECKS[answer](namespace[answer])) == "passed"
    assert verdict(lambda: CHECKS[answer](remote(answer))) == "passed"


@pytest.mark.timeout(120)
def test_the_traffic_is_counted_on_the_graders_fabric(kernel):
    namespace, remote = kernel
    forged = "sharded_dots_forging_its_counters"
    assert verdict(lambda: CHECKS[forged](namespace[forged])) == "passed"
    assert "one comm.allreduce of the B = 10 partial dot products" in verdict(
        lambda: CHECKS[forged](remote(forged)))
