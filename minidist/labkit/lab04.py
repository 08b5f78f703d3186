"""Checks for Lab 4 (data parallelism): every answer against one process on the whole batch.

Each check runs the function under test on P in-process ranks
(:func:`~minidist.labkit.ranks.run_ranks`), with the library's own data
parallelism **blocked** (:data:`LIBRARY_DATA_PARALLEL`: ``DataParallel``,
its bucket planner, buckets and reducer, its parameter broadcast), and
compares with a single-process reference computed before anything is blocked.
Each claim a task's text makes about its answer is one check, with a
sentence that names the claim:

1. averaged gradients: every rank's ``p.grad`` equals the gradient of the
   mean loss over the *global* batch, from one process; the traffic is that
   of one ``comm.allreduce`` per parameter;
2. buckets: the plan has each property the text lists (each tensor once,
   last first, one dtype per bucket, capacities, closed only when full) and
   then equals the library's planner's; the averages keep their dtype; the
   traffic is that of one ``comm.allreduce`` per bucket;
3. equivalence: P ranks with batch b, k SGD steps, end with the weights one
   process reaches with batch P·b (each rank starts from *different*
   weights, so rank 0's must be broadcast), and the gradients each rank hands
   to ``average`` at each step are those of its own b rows (the averaging is
   done by the grader's ``GradientAverager``, which sees them);
4. learning-rate schedule: values against ``optim.schedules.linear_scaling``;
5. straggler (``lab04_straggler.py``): a trace on the modelled clock, exact.

The library's ``comm.allreduce`` and ``comm.broadcast`` stay allowed: this
lab is about *using* the collective (Lab 3 was about writing it).

Each rank's part of a check is a probe of ``lab04_ranks.py`` (it builds the
rank's model from numbers and returns numbers), so that when the lab is
graded it runs in the student's kernel on a communicator the grader lends,
while the references, the traffic and the verdict stay here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm import allreduce
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import expect, expect_close
from minidist.labkit.lab04_ranks import (
    GradientAverager,
    average_on_rank,
    buckets_on_rank,
    fake_params,
    gradients_on,
    grads_of,
    make_data,
    mean_loss,
    plan_of,
    seeded_mlp,
    train_on_rank,
)
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import on_student
from minidist.optim import SGD
from minidist.optim.schedules import linear_scaling
from minidist.parallel.buckets import plan_buckets as library_planner

# What is blocked while a task is checked: the library's answers, marked @lab_answer where
# they are written (minidist.util.answers): DataParallel's parts for every task of the lab,
# and the schedules for Task 4.
LIBRARY_DATA_PARALLEL = ("lab04",)
LIBRARY_SCHEDULES = ("lab04_lr_schedule",)


def expect_same_arrays(what: str, got: list[Any], expected: list[np.ndarray],
                       rtol: float = 1e-9, atol: float = 1e-12) -> None:
    """Two lists of parameter-shaped arrays, element by element."""
    __tracebackhide__ = True
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        expect_close(f"{what} of parameter {i}", g, e, rtol=rtol, atol=atol)


def expect_own_rows_averaged(what: str, rank: int, received: list[list[np.ndarray]],
                             expected: list[list[np.ndarray]], rows: Callable[[int], str],
                             batch_per_rank: int) -> None:
    """Rank ``rank`` called ``average`` once per step, each time with the gradients of its
    own ``batch_per_rank`` rows (``rows(t)`` names them) at that step's weights:
    ``received`` is what the grader's averager got, ``expected[t]`` the reference's."""
    __tracebackhide__ = True
    steps = len(expected)
    expect(len(received) == steps, f"{what}: rank {rank} called average(model, c) "
           f"{len(received)} times in {steps} steps; each step averages once, after one "
           f"forward and backward on the rank's own b = {batch_per_rank} rows")
    for t, (got, own) in enumerate(zip(received, expected, strict=True)):
        expect(len(got) == len(own), f"{what}: rank {rank} averaged {len(got)} gradients in "
               f"step {t}; the model has {len(own)} parameters")
        expect_same_arrays(f"{what}: rank {rank}'s gradient before averaging in step {t} "
                           f"(one forward and backward on its own b = {batch_per_rank} rows, "
                           f"{rows(t)}, at the step's weights)", got, own, rtol=1e-8,
                           atol=1e-10)


def traffic_of_allreduces(world_size: int, buffers: list[tuple[int, Any]],
                          check: bool) -> list[tuple[int, int]]:
    """Each rank's (messages, bytes) sent by one ``comm.allreduce`` per (length, dtype)."""
    def body(c: Any) -> None:
        for n, dtype in buffers:
            allreduce(np.zeros(n, dtype=dtype), c, check=check)

    return [(s.messages_sent, s.bytes_sent) for s in run_ranks(body, world_size, "", ())[1]]


def expect_allreduces(what: str, stats: list[Any], buffers: list[tuple[int, Any]],
                      one_per: str, instead: str = "") -> None:
    """Each rank sent what one default ``comm.allreduce`` per buffer sends (with or without
    its agreement check)."""
    __tracebackhide__ = True
    got = [(s.messages_sent, s.bytes_sent) for s in stats]
    options = [traffic_of_allreduces(len(stats), buffers, check) for check in (True, False)]
    r = next((r for r in range(len(stats)) if got[r] != options[0][r]), 0)  # first odd rank
    expect(got in options, f"{what}: rank {r} sent {got[r][0]} messages, {got[r][1]} bytes; "
           f"one comm.allreduce (default arguments) per {one_per} ({len(buffers)} of "
           f"{[n for n, _ in buffers]} values) sends {options[0][r][0]} messages, "
           f"{options[0][r][1]} bytes{instead}")


# --- Task 1: average the gradients after backward ------------------------------------------
def check_average_gradients(average_gradients: Callable[[Any, Any], None], world_size: int,
                            batch_per_rank: int, sizes: list[int], seed: int = 0,
                            block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """Rank r runs backward on rows r·b..(r+1)·b-1, then ``average_gradients(model, c)``:
    every rank's gradients must be one process's on all P·b rows, with the traffic of
    one ``comm.allreduce`` per parameter."""
    __tracebackhide__ = True
    what = f"average_gradients, P = {world_size}, b = {batch_per_rank}, MLP {sizes}"
    x, y = make_data(world_size * batch_per_rank, sizes, seed)
    reference = seeded_mlp(sizes, seed)
    mean_loss(reference, x, y).backward()

    def body(c: Any) -> list[np.ndarray]:
        rows = slice(c.rank * batch_per_rank, (c.rank + 1) * batch_per_rank)
        return on_student(average_on_rank, average_gradients, c, sizes, seed, x[rows], y[rows])

    results, stats = run_ranks(body, world_size, what, block)
    for rank, grads in enumerate(results):
        expect_same_arrays(f"{what}: rank {rank}'s averaged gradient", grads,
                           grads_of(reference.parameters()))
    expect_allreduces(what, stats, [(p.size, p.dtype) for p in reference.parameters()],
                      "parameter")


# --- Task 2: buckets -----------------------------------------------------------------------
def check_bucket_plan(plan_buckets: Callable[..., list[list[int]]],
                      shapes: list[tuple[int, ...]], bucket_bytes: int,
                      first_bucket_bytes: int | None = None, dtypes: list[str] | None = None,
                      block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """The plan of tensors of ``shapes`` (and ``dtypes``): each property of the text, then
    the library's plan, bucket by bucket."""
    __tracebackhide__ = True
    params = fake_params(shapes, dtypes)
    first = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    what = (f"plan_buckets, {len(shapes)} tensors of {[p.data.nbytes for p in params]} bytes"
            + (f" ({', '.join(dtypes)})" if dtypes else "")
            + f", bucket_bytes = {bucket_bytes}"
            + ("" if first_bucket_bytes is None else f", first_bucket_bytes = {first}"))
    expected = library_planner(params, bucket_bytes, first_bucket_bytes)
    extra = () if first_bucket_bytes is None else (first_bucket_bytes,)
    with blocked(*block):
        got = on_student(plan_of, plan_buckets, shapes, dtypes, bucket_bytes, extra)
    flat = [i for bucket in got for i in bucket]
    expect(sorted(flat) == list(range(len(params))), f"{what}: the buckets {got} must hold "
           f"each tensor index 0..{len(params) - 1} exactly once")
    expect(flat == sorted(flat, reverse=True), f"{what}: the buckets {got} are not filled "
           "from the last tensor backwards (backward produces the last layer's gradients "
           f"first): expected {expected}")
    for k, bucket in enumerate(got):
        expect(bucket, f"{what}: bucket {k} is empty; every bucket holds at least one tensor "
               "(a tensor larger than the capacity gets a bucket of its own)")
        kinds = sorted({str(params[i].dtype) for i in bucket})
        expect(len(kinds) == 1, f"{what}: bucket {k} mixes dtypes {kinds}; a bucket holds "
               "one dtype (its flat buffer has one), so a tensor of another dtype closes it")
        size = sum(params[i].data.nbytes for i in bucket)
        capacity, name = (first, "the first bucket") if k == 0 else (bucket_bytes, f"bucket {k}")
        expect(len(bucket) == 1 or size <= capacity, f"{what}: {name} holds {size} bytes, "
               f"more than its capacity of {capacity} (first_bucket_bytes for the first "
               "bucket, bucket_bytes for the others)")
    expect(got == expected, f"{what}: the buckets are {got}, expected {expected}: close a "
           "bucket only when the next tensor would take it past its capacity (or has "
           "another dtype)")


def check_bucketed_allreduce(allreduce_in_buckets: Callable[..., None], world_size: int,
                             shapes: list[tuple[int, ...]], bucket_bytes: int,
                             first_bucket_bytes: int | None = None,
                             dtypes: list[str] | None = None, seed: int = 0,
                             block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """Every ``p.grad`` becomes the mean over the ranks, keeps its dtype, and each rank's
    messages and bytes are those of one default ``comm.allreduce`` per bucket of the plan."""
    __tracebackhide__ = True
    what = (f"allreduce_in_buckets, P = {world_size}, {len(shapes)} tensors, bucket_bytes = "
            f"{bucket_bytes}" + ("" if first_bucket_bytes is None else
                                 f", first_bucket_bytes = {first_bucket_bytes}"))
    rng = np.random.default_rng(seed)
    params = fake_params(shapes, dtypes)
    grads = [[rng.standard_normal(p.shape).astype(p.dtype) for p in params]
             for _ in range(world_size)]
    plan = library_planner(params, bucket_bytes, first_bucket_bytes)
    buffers = [(sum(params[i].size for i in bucket), params[bucket[0]].dtype) for bucket in plan]
    extra = () if first_bucket_bytes is None else (first_bucket_bytes,)

    def body(c: Any) -> list[np.ndarray]:
        return on_student(buckets_on_rank, allreduce_in_buckets, c, shapes, dtypes,
                          grads[c.rank], bucket_bytes, extra)

    results, stats = run_ranks(body, world_size, what, block)
    for rank, got in enumerate(results):
        for i, (g, p) in enumerate(zip(got, params, strict=True)):
            expect(g is None or g.dtype == p.dtype, f"{what}: rank {rank}'s p.grad of "
                   f"parameter {i} is {g.dtype if g is not None else None}, but its "
                   f"parameter is {p.dtype}: the average keeps the gradient's dtype")
        mean = [np.mean([grads[r][i].astype(np.float64) for r in range(world_size)], axis=0)
                for i in range(len(params))]
        single = any(p.dtype == np.float32 for p in params)
        expect_same_arrays(f"{what}: rank {rank}'s averaged gradient", got, mean,
                           rtol=1e-5 if single else 1e-9, atol=1e-6 if single else 1e-12)
    per_tensor = traffic_of_allreduces(world_size, [(p.size, p.dtype) for p in params], True)
    expect_allreduces(what, stats, buffers, "bucket",
                      f" (one per tensor would send {per_tensor[0][0]} from rank 0)")


# --- Task 3: P ranks with batch b equal one process with batch P·b -------------------------
def check_equivalence(train_data_parallel: Callable[..., Any], world_size: int,
                      batch_per_rank: int, steps: int, lr: float, sizes: list[int],
                      seed: int = 0, block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """Rank r's model starts from seed ``seed + r``; after ``train_data_parallel`` every rank
    must hold the weights of one process (seed ``seed``) after ``steps`` SGD steps on rows
    t·B..(t+1)·B-1, B = P·b, each rank running one forward and backward of its own b rows
    per step: the gradients it hands to ``average`` (Task 1's answer, done by the grader's
    :class:`GradientAverager`, so that this task stands alone) are checked against them."""
    __tracebackhide__ = True
    what = (f"train_data_parallel, P = {world_size}, b = {batch_per_rank}, {steps} steps, "
            f"lr = {lr:g}")
    global_batch = world_size * batch_per_rank
    x, y = make_data(global_batch * steps, sizes, seed)
    reference = seeded_mlp(sizes, seed)
    optimizer = SGD(reference.parameters(), lr=lr)

    def own_rows(t: int, rank: int) -> slice:
        start = t * global_batch + rank * batch_per_rank
        return slice(start, start + batch_per_rank)

    own = []  # own[t][r]: the gradient of rank r's rows at step t's weights
    for t in range(steps):
        own.append([gradients_on(reference, x[own_rows(t, r)], y[own_rows(t, r)])
                    for r in range(world_size)])
        rows = slice(t * global_batch, (t + 1) * global_batch)
        optimizer.zero_grad()
        mean_loss(reference, x[rows], y[rows]).backward()
        optimizer.step()

    def body(c: Any) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        averager = GradientAverager(c)
        weights = on_student(train_on_rank, train_data_parallel, c, averager, sizes, seed, x,
                             y, batch_per_rank, steps, lr)
        return weights, averager.received

    results, _ = run_ranks(body, world_size, what, block)
    expected = [p.data for p in reference.parameters()]
    for rank, (params, received) in enumerate(results):
        expect_same_arrays(f"{what}: rank {rank}'s final weights", params, expected,
                           rtol=1e-8, atol=1e-10)
        expect_own_rows_averaged(
            what, rank, received, [own[t][rank] for t in range(steps)],
            lambda t, r=rank: f"x[{own_rows(t, r).start}:{own_rows(t, r).stop}]", batch_per_rank)


# --- Task 4: linear scaling with warm-up ---------------------------------------------------
def check_lr_schedule(warmup_lr: Callable[[int, float, int, int, int], float],
                      cases: list[tuple[float, int, int, int]],
                      block: tuple[str, ...] = LIBRARY_SCHEDULES) -> None:
    """``warmup_lr(step, base_lr, base_batch, batch, warmup_steps)`` for steps 0..W+3 of each
    case ``(base_lr, base_batch, batch, warmup_steps)``, against ``linear_scaling``."""
    __tracebackhide__ = True
    table = [(case, step, linear_scaling(case[0], case[2], case[1], case[3])(step))
             for case in cases for step in range(case[3] + 4)]
    with blocked(*block):
        for (base_lr, base_batch, batch, warmup), step, lr in table:
            got = warmup_lr(step, base_lr, base_batch, batch, warmup)
            expect_close(f"warmup_lr(step={step}, base_lr={base_lr:g}, base_batch={base_batch},"
                         f" batch={batch}, warmup_steps={warmup})", float(got), lr, rtol=1e-9,
                         atol=1e-15)
