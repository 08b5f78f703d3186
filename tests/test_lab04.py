"""Lab 4's checks, run on the library's reference code, one pytest marker per task.

``pytest -m lab04_buckets`` runs the check that grades Task 2 against the
library's bucket planner and ``comm.allreduce``; the notebook and the library
are held to the same checks. Also: each check rejects a known-wrong answer.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from minidist.comm import allreduce, broadcast
from minidist.labkit import CheckFailed
from minidist.labkit.lab04 import (
    MB,
    check_average_gradients,
    check_bucket_plan,
    check_bucketed_allreduce,
    check_equivalence,
    check_lr_schedule,
    check_straggler,
    mean_loss,
)
from minidist.optim import SGD
from minidist.optim.schedules import linear_scaling
from minidist.parallel.buckets import Bucket, plan_buckets
from minidist.parallel.ddp import DataParallel
from minidist.parallel.timing import TraceRecorder

SHAPES = [(4, 3), (3,), (3, 5), (5,), (40,), (2, 2)]


def library_average(model, c) -> None:
    """The library's pieces: one bucket per tensor (each gradient divided by P), allreduce,
    write back."""
    params = list(model.parameters())
    for group in plan_buckets(params, 0, 0):
        bucket = Bucket([params[i] for i in group], scale=1 / c.size)
        for position, p in enumerate(bucket.params):
            bucket.put(position, p.grad)
        allreduce(bucket.buffer, c, out=bucket.buffer)
        bucket.write_back()


def library_allreduce_in_buckets(params, c, bucket_bytes) -> None:
    """The library's planner, one flat buffer and one ``comm.allreduce`` per bucket."""
    for group in plan_buckets(params, bucket_bytes / MB, bucket_bytes / MB):
        flat = np.concatenate([params[i].grad.ravel() for i in group])
        flat = allreduce(flat, c) / c.size
        offset = 0
        for i in group:
            params[i].grad = flat[offset:offset + params[i].size].reshape(params[i].shape)
            offset += params[i].size


def ddp_train(c, model, x, y, batch_per_rank, steps, lr, average) -> None:
    """Training with ``DataParallel`` (which broadcasts and averages by itself)."""
    ddp = DataParallel(model, c, bucket_mb=1e-4)
    optimizer = SGD(ddp.parameters(), lr=lr)
    for t in range(steps):
        start = (t * c.size + c.rank) * batch_per_rank
        rows = slice(start, start + batch_per_rank)
        optimizer.zero_grad()
        mean_loss(ddp, x[rows], y[rows]).backward()
        optimizer.step()


def ddp_timed_steps(c, model, x, y, steps, slow_rank, delay, average) -> list:
    """DataParallel without overlap records compute and comm; the slow rank sleeps in compute."""
    recorder = TraceRecorder(c.rank)
    ddp = DataParallel(model, c, overlap=False, recorder=recorder)
    optimizer = SGD(ddp.parameters(), lr=0.1)
    b = len(x) // c.size
    recorder.start(c)
    for _ in range(steps):
        loss = mean_loss(ddp, x[c.rank * b:(c.rank + 1) * b], y[c.rank * b:(c.rank + 1) * b])
        if c.rank == slow_rank:
            time.sleep(delay)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return recorder.to_list()


@pytest.mark.timeout(60)
@pytest.mark.lab04_average_gradients
@pytest.mark.parametrize("world_size, batch", [(1, 3), (3, 2), (4, 5)])
def test_average_gradients(world_size, batch):
    check_average_gradients(library_average, world_size, batch, [5, 7, 3], seed=world_size,
                            block=())


@pytest.mark.timeout(60)
def test_average_gradients_rejects_a_sum():
    def summed(model, c):
        for p in model.parameters():
            p.grad = allreduce(p.grad, c)

    with pytest.raises(CheckFailed, match="rank 0's averaged gradient of parameter 0"):
        check_average_gradients(summed, 2, 3, [4, 3])


@pytest.mark.timeout(60)
@pytest.mark.lab04_buckets
@pytest.mark.parametrize("bucket_bytes", [0, 100, 200, 10_000])
def test_buckets(bucket_bytes):
    check_bucket_plan(lambda ps, b: plan_buckets(ps, b / MB, b / MB), SHAPES, bucket_bytes,
                      block=())
    check_bucketed_allreduce(library_allreduce_in_buckets, 3, SHAPES, bucket_bytes, seed=1,
                             block=())


@pytest.mark.timeout(60)
def test_buckets_reject_one_allreduce_per_tensor_and_a_forward_plan():
    def per_tensor(params, c, bucket_bytes):
        for p in params:
            p.grad = allreduce(p.grad, c) / c.size

    with pytest.raises(CheckFailed, match=r"sent 18 messages, .* sends 3 messages"):
        check_bucketed_allreduce(per_tensor, 2, SHAPES, 10_000)

    def forward_order(params, bucket_bytes):
        return [list(reversed(b)) for b in reversed(plan_buckets(params[::-1], 1e-4, 1e-4))]

    with pytest.raises(CheckFailed, match="bucket 0 holds tensors"):
        check_bucket_plan(forward_order, SHAPES, 200, block=())


@pytest.mark.timeout(60)
@pytest.mark.lab04_equivalence
@pytest.mark.parametrize("world_size, batch, steps", [(1, 4, 2), (2, 3, 3), (4, 2, 3)])
def test_equivalence(world_size, batch, steps):
    check_equivalence(ddp_train, world_size, batch, steps, lr=0.5, sizes=[6, 8, 3], seed=4,
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

    def whole_batch(c, model, x, y, batch_per_rank, steps, lr, average):
        """Every rank alone on the whole global batch: the right weights, P times the work."""
        for p in model.parameters():
            p.data[...] = broadcast(p.data, c)
        optimizer = SGD(model.parameters(), lr=lr)
        global_batch = batch_per_rank * c.size
        for t in range(steps):
            rows = slice(t * global_batch, (t + 1) * global_batch)
            optimizer.zero_grad()
            mean_loss(model, x[rows], y[rows]).backward()
            optimizer.step()

    with pytest.raises(CheckFailed, match=r"rank 0 ran forward on \[6, 6\] rows"):
        check_equivalence(whole_batch, 2, 3, 2, lr=0.5, sizes=[6, 8, 3])


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


@pytest.mark.timeout(60)
@pytest.mark.lab04_straggler
def test_straggler():
    traces = check_straggler(ddp_timed_steps, world_size=3, slow_rank=1, delay=0.1, block=())
    assert len(traces) == 3


@pytest.mark.timeout(60)
def test_straggler_rejects_a_rank_that_never_slows_down():
    def never_slow(c, model, x, y, steps, slow_rank, delay, average):
        return ddp_timed_steps(c, model, x, y, steps, slow_rank, 0.0, average)

    with pytest.raises(CheckFailed, match="the slow rank computed for"):
        check_straggler(never_slow, world_size=2, slow_rank=0, delay=0.1, block=())
