"""Lab 4, Task 5: the straggler check on the modelled clock, exact, and each claim it makes.

``reference_timed_steps`` is the solution's answer; each wrong answer below
breaks one sentence of the task's text and fails with the sentence that
names it (the fixtures in ``tests/fixtures/lab04/`` are the same answers in
a notebook, graded by nbgrader).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from minidist.comm import broadcast
from minidist.labkit import CheckFailed
from minidist.labkit.lab04 import mean_loss
from minidist.labkit.lab04_straggler import check_straggler, expect_recorded_operations
from minidist.optim import SGD
from minidist.parallel.timing import TraceRecorder


def timed(c, model, x, y, steps, slow_rank, delay, average, lr=0.1, slow=None, barrier=True,
          extra_compute=False, extra_comm=False, whole=False, shift=0.0, split=False):
    """The solution's ``timed_steps``; the keywords break one claim each."""
    recorder = TraceRecorder(c.rank, clock=lambda: c.stats.clock)
    optimizer = SGD(model.parameters(), lr=lr)
    b = len(x) // c.size
    rows = slice(None) if whole else slice(c.rank * b, (c.rank + 1) * b)
    if split:
        rows = np.array_split(np.arange(len(x)), c.size)[c.rank]
    recorder.start(c)
    for _ in range(steps):
        with recorder.interval("compute"):
            optimizer.zero_grad()
            mean_loss(model, x[rows], y[rows]).backward()
            if c.rank == slow_rank:
                (slow or c.compute)(delay)
        with recorder.interval("wait"):
            if barrier:
                c.barrier()
        with recorder.interval("comm"):
            average(model, c)
            if extra_comm:  # "to keep the replicas in sync": the same weights, more traffic
                for p in model.parameters():
                    p.data[...] = broadcast(p.data, c)
        if extra_compute:
            with recorder.interval("compute"):
                optimizer.step()
        else:
            optimizer.step()
    return [(kind, lane, start + shift, end + shift) for kind, lane, start, end
            in recorder.to_list()]


def reference_timed_steps(c, model, x, y, steps, slow_rank, delay, average):
    return timed(c, model, x, y, steps, slow_rank, delay, average)


@pytest.mark.timeout(60)
@pytest.mark.lab04_straggler
@pytest.mark.parametrize("world_size, slow_rank, delay, steps", [
    (3, 1, 0.1, 3), (2, 0, 0.05, 2), (4, 3, 0.2, 2), (5, 2, 0.3, 3)])
def test_straggler(world_size, slow_rank, delay, steps):
    traces = check_straggler(reference_timed_steps, world_size, slow_rank, delay, steps,
                             block=())
    assert len(traces) == world_size and all(len(t) == 3 * steps for t in traces)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("broken, message", [
    (dict(extra_compute=True), "each of the 3 steps records three intervals on lane 'main', "
                               "in this order: compute, wait, comm"),
    (dict(slow=time.sleep), r"rank 1's compute in step 0 lasted 0 s on the modelled clock, "
                            r"expected 0.1 s: only the slow rank adds c.compute\(delay\)"),
    (dict(barrier=False), r"rank 0's wait in step 0 lasted 0 s, expected 0.1 s: c.barrier\(\) "
                          "inside wait holds every rank until the last one arrives"),
    (dict(extra_comm=True), r"rank 0's comm in step 0 lasted .* the modelled cost of one "
                            r"average\(model, c\)"),
    (dict(whole=True), r"rank 0's weights after training \(one process: 3 SGD steps, lr 0.1, "
                       r"on the first P·b = 12 rows, rank r's from r·b\)"),
    (dict(shift=1e-3), r"rank 0's compute in step 0 is recorded from 0.001 to 0.001 s; the "
                       r"grader saw the end of the step before \(time 0 in step 0\) and the "
                       r"call of c.barrier\(\) at 0 and 0 s"),
    (dict(lr=0.01), r"rank 0's weights after training \(one process: 3 SGD steps, lr 0.1, on "
                    r"the first P·b = 12 rows, rank r's from r·b\) of parameter 0: differs"),
    # len(x) that P does not divide: the extra row given to a rank (np.array_split) passed
    (dict(split=True), r"rank 0's weights after training \(one process: 3 SGD steps, lr 0.1, "
                       r"on the first P·b = 12 rows, rank r's from r·b\)"),
])
def test_each_claim_rejects_the_answer_that_breaks_it(broken, message):
    def wrong(c, model, x, y, steps, slow_rank, delay, average):
        return timed(c, model, x, y, steps, slow_rank, delay, average, **broken)

    with pytest.raises(CheckFailed, match=message):
        check_straggler(wrong, world_size=3, slow_rank=1, delay=0.1, block=())


def test_a_trace_is_held_to_the_operations_the_grader_did():
    """Intervals of the right lengths, but not where the barriers and averages ran: a
    trace written from arithmetic rather than recorded around the calls."""
    barriers, averages = [(0.0, 0.5), (0.5, 0.6), (1.0, 1.0)], [(0.6, 0.8), (1.0, 1.2)]
    honest = [("compute", "main", 0.0, 0.0), ("wait", "main", 0.0, 0.1),
              ("comm", "main", 0.1, 0.3), ("compute", "main", 0.3, 0.5),
              ("wait", "main", 0.5, 0.5), ("comm", "main", 0.5, 0.7)]
    expect_recorded_operations("w", 0, honest, barriers, averages)
    late = honest[:5] + [("comm", "main", 0.6, 0.8)]
    with pytest.raises(CheckFailed, match=r"rank 0's comm in step 1 is recorded from 0.6 to 0.8 "
                                          r"s; the grader saw average\(model, c\) called and "
                                          r"returning at 0.5 and 0.7 s"):
        expect_recorded_operations("w", 0, late, barriers, averages)
    with pytest.raises(CheckFailed, match=r"rank 0 called c.barrier\(\) 2 times; "
                                          r"recorder.start\(c\) calls it once"):
        expect_recorded_operations("w", 0, honest, barriers[1:], averages)
