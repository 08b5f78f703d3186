"""Lab 4's checks, run on the library's reference code, one pytest marker per task.

``pytest -m lab04_buckets`` runs the check that grades Task 2 against the
library's bucket planner and ``comm.allreduce``; the notebook and the library
are held to the same checks, and the library's planner is the solution's
code. Also: each claim a check makes rejects a known-wrong answer, in a
sentence that names the claim (Task 5's are in ``test_lab04_straggler.py``).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from notebook_source import SOLUTIONS, answer_function, code

from minidist.comm import allreduce, broadcast, reduce
from minidist.labkit import CheckFailed, task
from minidist.labkit.lab04 import (
    check_average_gradients,
    check_bucket_plan,
    check_bucketed_allreduce,
    check_equivalence,
    check_lr_schedule,
    mean_loss,
)
from minidist.labkit.lab04_ranks import GradientAverager, averaging_with
from minidist.optim import SGD
from minidist.optim.schedules import linear_scaling
from minidist.parallel import buckets
from minidist.parallel.buckets import plan_buckets
from minidist.parallel.replicas import broadcast_parameters

SOLUTION = SOLUTIONS / "lab04_data_parallel" / "lab04_data_parallel.ipynb"
SHAPES = [(4, 3), (3,), (3, 5), (5,), (40,), (2, 2)]
MIXED = ["float32", "float32", "float64", "float64", "float32", "float64"]


def library_allreduce_in_buckets(params, c, bucket_bytes, first_bucket_bytes=None) -> None:
    """The library's planner, one flat buffer and one ``comm.allreduce`` per bucket."""
    for group in plan_buckets(params, bucket_bytes, first_bucket_bytes):
        flat = allreduce(np.concatenate([params[i].grad.ravel() for i in group]), c) / c.size
        offset = 0
        for i in group:
            params[i].grad = flat[offset:offset + params[i].size].reshape(params[i].shape)
            offset += params[i].size


def library_train(c, model, x, y, batch_per_rank, steps, lr, average) -> None:
    """Training with the library's parts: ``DataParallel``'s broadcast of rank 0's weights,
    rank r's rows, ``average`` (``DataParallel`` itself averages during backward, which
    ``test_ddp.py`` holds to one process)."""
    broadcast_parameters(model, c)
    optimizer = SGD(model.parameters(), lr=lr)
    for t in range(steps):
        start = (t * c.size + c.rank) * batch_per_rank
        rows = slice(start, start + batch_per_rank)
        optimizer.zero_grad()
        mean_loss(model, x[rows], y[rows]).backward()
        average(model, c)
        optimizer.step()


def test_the_library_planner_is_the_solution_line_for_line():
    assert code(answer_function(SOLUTION, "plan_buckets")) == code(buckets.plan_buckets)


@pytest.mark.timeout(60)
@pytest.mark.lab04_average_gradients
@pytest.mark.parametrize("world_size, batch", [(1, 3), (3, 2), (4, 5)])
def test_average_gradients(world_size, batch):
    def reference_average(model, c):  # as Tasks 3 and 5 get it
        averaging_with(GradientAverager(c))(model, c)

    check_average_gradients(reference_average, world_size, batch, [5, 7, 3], seed=world_size,
                            block=())


@pytest.mark.timeout(60)
def test_average_gradients_rejects_a_sum_and_a_reduce_then_broadcast():
    def summed(model, c):
        for p in model.parameters():
            p.grad = allreduce(p.grad, c)

    with pytest.raises(CheckFailed, match="rank 0's averaged gradient of parameter 0"):
        check_average_gradients(summed, 2, 3, [4, 3])

    def through_rank_0(model, c):  # the right values, not the traffic of an allreduce
        for p in model.parameters():
            total = reduce(p.grad, c, root=0)
            total = broadcast(total if c.rank == 0 else np.empty_like(p.grad), c, root=0)
            p.grad = total / c.size

    with pytest.raises(CheckFailed, match=r"rank 0 sent \d+ messages, \d+ bytes; one "
                       r"comm.allreduce \(default arguments\) per parameter \(2 of"):
        check_average_gradients(through_rank_0, 3, 2, [4, 3])


@pytest.mark.timeout(60)
@pytest.mark.lab04_buckets
@pytest.mark.parametrize("bucket_bytes, first", [(0, None), (100, None), (200, 40),
                                                  (10_000, None), (10_000, 0)])
def test_buckets(bucket_bytes, first):
    for dtypes in (None, MIXED):
        check_bucket_plan(plan_buckets, SHAPES, bucket_bytes, first, dtypes, block=())
        check_bucketed_allreduce(library_allreduce_in_buckets, 3, SHAPES, bucket_bytes, first,
                                 dtypes, seed=1, block=())


def wrong_plan(params, bucket_bytes, first_bucket_bytes=None, *, reverse=True, dtype=True,
               first=True, greedy=True, full_at_capacity=False, empty_ok=False):
    """The planner with one of its rules broken."""
    order = list(reversed(range(len(params)))) if reverse else list(range(len(params)))
    out, current, used = [], [], 0
    for i in order:
        p = params[i]
        capacity = bucket_bytes if out or not first or first_bucket_bytes is None \
            else first_bucket_bytes
        past = used + p.data.nbytes >= capacity if full_at_capacity \
            else used + p.data.nbytes > capacity
        if (current or empty_ok) and (past or not greedy
                                      or dtype and current and p.dtype != params[current[0]].dtype):
            out, current, used = out + [current], [], 0
        current, used = current + [i], used + p.data.nbytes
    return out + [current]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("broken, case, message", [
    (dict(reverse=False), (200, None, None), "not filled from the last tensor backwards"),
    (dict(dtype=False), (10_000, None, MIXED), "bucket 0 mixes dtypes"),
    (dict(first=False), (400, 40, None), "the first bucket holds 392 bytes, more than its "
                                          "capacity of 40"),
    (dict(greedy=False), (200, None, None), r"close a bucket only when the next tensor"),
    # a bucket filled exactly (32 + 320 bytes) closed one tensor early: it scored 12/12
    (dict(full_at_capacity=True), (352, None, None), r"the buckets are \[\[5\], \[4\], .*"
                                                      r"expected \[\[5, 4\], \[3, 2, 1, 0\]\]"),
    # it read "bucket 0 mixes dtypes []"
    (dict(empty_ok=True), (0, None, None), r"bucket 0 is empty; every bucket holds at least"),
])
def test_bucket_plan_names_the_broken_rule(broken, case, message):
    def planner(params, bucket_bytes, first_bucket_bytes=None):
        return wrong_plan(params, bucket_bytes, first_bucket_bytes, **broken)

    with pytest.raises(CheckFailed, match=message):
        check_bucket_plan(planner, SHAPES, *case, block=())


@pytest.mark.timeout(60)
def test_bucketed_allreduce_rejects_one_allreduce_per_tensor_and_a_float64_buffer():
    def per_tensor(params, c, bucket_bytes, first_bucket_bytes=None):
        for p in params:
            p.grad = allreduce(p.grad, c) / c.size

    with pytest.raises(CheckFailed, match=r"sent 18 messages, .* sends 3 messages"):
        check_bucketed_allreduce(per_tensor, 2, SHAPES, 10_000)

    def float64_buffer(params, c, bucket_bytes, first_bucket_bytes=None):
        for group in plan_buckets(params, bucket_bytes, first_bucket_bytes):
            flat = allreduce(np.concatenate([params[i].grad.ravel() for i in group])
                             .astype(np.float64), c) / c.size
            offset = 0
            for i in group:
                params[i].grad = flat[offset:offset + params[i].size].reshape(params[i].shape)
                offset += params[i].size

    with pytest.raises(CheckFailed, match="p.grad of parameter 0 is float64, but its "
                       "parameter is float32: the average keeps the gradient's dtype"):
        check_bucketed_allreduce(float64_buffer, 2, SHAPES, 10_000, dtypes=MIXED, block=())


@pytest.mark.timeout(60)
@pytest.mark.lab04_equivalence
@pytest.mark.parametrize("world_size, batch, steps", [(1, 4, 2), (2, 3, 3), (4, 2, 3)])
def test_equivalence(world_size, batch, steps):
    check_equivalence(library_train, world_size, batch, steps, lr=0.5, sizes=[6, 8, 3], seed=4,
                      block=())


@pytest.mark.timeout(60)
def test_equivalence_rejects_rank_zero_weights_not_broadcast_and_whole_batches():
    def no_broadcast(c, model, x, y, batch_per_rank, steps, lr, average):
        optimizer = SGD(model.parameters(), lr=lr)
        for t in range(steps):
            start = (t * c.size + c.rank) * batch_per_rank
            optimizer.zero_grad()
            mean_loss(model, x[start:start + batch_per_rank],
                      y[start:start + batch_per_rank]).backward()
            average(model, c)
            optimizer.step()

    with pytest.raises(CheckFailed, match="rank 0's final weights"):
        check_equivalence(no_broadcast, 2, 3, 2, lr=0.5, sizes=[6, 8, 3])

    def whole_batch(c, model, x, y, batch_per_rank, steps, lr, average, averages=False):
        """Every rank alone on the whole global batch: the right weights, P times the work
        (and, with ``averages``, an average of P equal gradients)."""
        for p in model.parameters():
            p.data[...] = broadcast(p.data, c)
        optimizer = SGD(model.parameters(), lr=lr)
        global_batch = batch_per_rank * c.size
        for t in range(steps):
            rows = slice(t * global_batch, (t + 1) * global_batch)
            optimizer.zero_grad()
            mean_loss(model, x[rows], y[rows]).backward()
            if averages:
                average(model, c)
            optimizer.step()

    with pytest.raises(CheckFailed, match=r"rank 0 called average\(model, c\) 0 times in 2 "
                                          r"steps; each step averages once"):
        check_equivalence(whole_batch, 2, 3, 2, lr=0.5, sizes=[6, 8, 3])
    with pytest.raises(CheckFailed, match=r"rank 0's gradient before averaging in step 0 \(one "
                                          r"forward and backward on its own b = 3 rows, "
                                          r"x\[0:3\], at the step's weights\) of parameter 0"):
        check_equivalence(functools.partial(whole_batch, averages=True), 2, 3, 2, lr=0.5,
                          sizes=[6, 8, 3])


@pytest.mark.lab04_lr_schedule
def test_lr_schedule():
    def library(step, base_lr, base_batch, batch, warmup_steps):
        return linear_scaling(base_lr, batch, base_batch, warmup_steps)(step)

    # by hand: 0.1 at batch 32 -> 0.8 at batch 256, reached linearly over 4 steps
    hand = [0.1, 0.275, 0.45, 0.625, 0.8, 0.8]
    np.testing.assert_allclose([library(t, 0.1, 32, 256, 4) for t in range(6)], hand)
    check_lr_schedule(library, [(0.1, 32, 256, 4), (0.05, 64, 64, 3), (0.2, 100, 50, 0)],
                      block=())
    with pytest.raises(CheckFailed, match=r"step=0, .*got 0, expected 0.1 "):  # warm from 0
        check_lr_schedule(lambda t, lr, b0, b, w: lr * b / b0 * min(1, t / w),
                          [(0.1, 32, 256, 4)])


def test_a_failure_names_its_task():
    with pytest.raises(CheckFailed, match=r"^Task 4, linear scaling: warmup_lr\(step=0"):
        with task("Task 4, linear scaling"):
            check_lr_schedule(lambda t, lr, b0, b, w: 0.0, [(0.1, 32, 256, 4)])
