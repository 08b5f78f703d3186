"""Lab 4's checks give the same verdict on the student's functions seen from the grader.

As in ``test_grading_integrity.py``, both ends run in one process
(``serve.answer`` as the channel): each rank's part of a check is a probe
(``labkit/lab04_ranks.py``) run on the student's side with a communicator
the grader lends, so the traffic a check reads is counted on the grader's
fabric, and counters the student's code rewrites change nothing there.
"""

from __future__ import annotations

import pytest
from student_kernel import both_ends, same_verdict, verdict

from minidist.labkit.lab04 import (
    check_average_gradients,
    check_bucket_plan,
    check_bucketed_allreduce,
    check_equivalence,
    check_lr_schedule,
)
from minidist.labkit.lab04_straggler import check_straggler

STUDENT = '''
import numpy as np
from minidist import comm
from minidist.labkit.lab04 import mean_loss
from minidist.optim import SGD
from minidist.parallel import DataParallel
from minidist.parallel.timing import TraceRecorder

def average_gradients(model, c):
    for p in model.parameters():
        p.grad = comm.allreduce(p.grad, c) / c.size

def average_forging_its_counters(model, c):
    """Measures what one allreduce per parameter sends, averages through rank 0 (the right
    values, other traffic), then writes the measured counts into its counters."""
    start = (c.stats.messages_sent, c.stats.bytes_sent)
    for p in model.parameters():
        comm.allreduce(np.zeros_like(p.grad), c)
    wanted = (c.stats.messages_sent - start[0], c.stats.bytes_sent - start[1])
    for p in model.parameters():
        total = p.grad.copy()
        if c.rank == 0:
            for source in range(1, c.size):
                incoming = np.empty_like(total)
                c.recv(incoming, source)
                total += incoming
            for dest in range(1, c.size):
                c.send(total, dest)
        else:
            c.send(p.grad, 0)
            c.recv(total, 0)
        p.grad = total / c.size
    c.stats.messages_sent, c.stats.bytes_sent = start[0] + wanted[0], start[1] + wanted[1]

def plan_buckets(params, bucket_bytes, first_bucket_bytes=None):
    first = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    buckets, current, used = [], [], 0
    for index in reversed(range(len(params))):
        p = params[index]
        capacity = first if not buckets else bucket_bytes
        if current and (used + p.data.nbytes > capacity or p.dtype != params[current[0]].dtype):
            buckets.append(current)
            current, used = [], 0
        current.append(index)
        used += p.data.nbytes
    return buckets + [current]

def allreduce_in_buckets(params, c, bucket_bytes, first_bucket_bytes=None):
    for bucket in plan_buckets(params, bucket_bytes, first_bucket_bytes):
        total = comm.allreduce(np.concatenate([params[i].grad.ravel() for i in bucket]), c)
        offset = 0
        for i in bucket:
            p = params[i]
            p.grad = total[offset:offset + p.size].reshape(p.shape) / c.size
            offset += p.size

def train_data_parallel(c, model, x, y, batch_per_rank, steps, lr, average):
    for p in model.parameters():
        p.data[...] = comm.broadcast(p.data, c, root=0)
    optimizer = SGD(model.parameters(), lr=lr)
    for t in range(steps):
        start = (t * c.size + c.rank) * batch_per_rank
        rows = slice(start, start + batch_per_rank)
        optimizer.zero_grad()
        mean_loss(model, x[rows], y[rows]).backward()
        average(model, c)
        optimizer.step()

def train_forging_the_rows(c, model, x, y, batch_per_rank, steps, lr, average):
    """Every rank trains on the whole global batch (the right weights: the average of P
    equal gradients is that gradient) and writes b rows a step where a count was kept."""
    for p in model.parameters():
        p.data[...] = comm.broadcast(p.data, c, root=0)
    optimizer = SGD(model.parameters(), lr=lr)
    rows = c.size * batch_per_rank
    for t in range(steps):
        optimizer.zero_grad()
        mean_loss(model, x[t * rows:(t + 1) * rows], y[t * rows:(t + 1) * rows]).backward()
        if hasattr(model, "rows_seen"):
            model.rows_seen[:] = [batch_per_rank] * steps
        average(model, c)
        optimizer.step()

def train_with_the_library(c, model, x, y, batch_per_rank, steps, lr, average):
    DataParallel(model, c)

def warmup_lr(step, base_lr, base_batch, batch, warmup_steps):
    scaled = base_lr * batch / base_batch
    return scaled if step >= warmup_steps else base_lr + (scaled - base_lr) * step / warmup_steps

def timed_steps(c, model, x, y, steps, slow_rank, delay, average):
    recorder = TraceRecorder(c.rank, clock=lambda: c.stats.clock)
    optimizer = SGD(model.parameters(), lr=0.1)
    b = len(x) // c.size
    rows = slice(c.rank * b, (c.rank + 1) * b)
    recorder.start(c)
    for _ in range(steps):
        with recorder.interval("compute"):
            optimizer.zero_grad()
            mean_loss(model, x[rows], y[rows]).backward()
            if c.rank == slow_rank:
                c.compute(delay)
        with recorder.interval("wait"):
            c.barrier()
        with recorder.interval("comm"):
            average(model, c)
        optimizer.step()
    return recorder.to_list()
'''

CHECKS = {
    "average_gradients": lambda f: check_average_gradients(f, 3, 2, [4, 5, 3], seed=1),
    "average_forging_its_counters": lambda f: check_average_gradients(f, 3, 2, [4, 3]),
    "plan_buckets": lambda f: check_bucket_plan(f, [(7, 5), (7,), (3, 7), (3,)], 300, 100,
                                                ["float64", "float64", "float32", "float32"]),
    "allreduce_in_buckets": lambda f: check_bucketed_allreduce(
        f, 3, [(7, 5), (7,), (3, 7), (3,)], 200, dtypes=["float64", "float64", "float32",
                                                             "float32"]),
    "train_data_parallel": lambda f: check_equivalence(f, 3, 2, 2, 0.3, [5, 6, 3], seed=1),
    "train_forging_the_rows": lambda f: check_equivalence(f, 3, 2, 2, 0.3, [5, 6, 3], seed=1),
    "train_with_the_library": lambda f: check_equivalence(f, 2, 2, 1, 0.3, [4, 3]),
    "warmup_lr": lambda f: check_lr_schedule(f, [(0.1, 32, 256, 4), (0.2, 100, 50, 0)]),
    "timed_steps": lambda f: check_straggler(f, world_size=3, slow_rank=1, delay=0.1, steps=2),
}


@pytest.fixture
def kernel():
    namespace: dict = {}
    exec(STUDENT, namespace)
    return both_ends(namespace)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", sorted(set(CHECKS) - {"average_forging_its_counters"}))
def test_each_check_gives_the_local_verdict(kernel, answer):
    local = same_verdict(lambda get: CHECKS[answer](get(answer)), kernel)
    wrong = {"train_with_the_library": "write your own",
             "train_forging_the_rows": "rank 0's gradient before averaging in step 0 (one "
                                       "forward and backward on its own b = 2 rows, x[0:2]"}
    assert (local == "passed") == (answer not in wrong)
    if answer in wrong:
        assert wrong[answer] in local


@pytest.mark.timeout(120)
def test_the_traffic_is_counted_on_the_graders_fabric(kernel):
    """Counters the answer rewrites pass in its own interpreter (why the ranks moved out);
    the grader's fabric shows the traffic through rank 0."""
    namespace, remote = kernel
    forged = "average_forging_its_counters"
    assert verdict(lambda: CHECKS[forged](namespace[forged])) == "passed"
    assert "one comm.allreduce (default arguments) per parameter" in verdict(
        lambda: CHECKS[forged](remote(forged)))
