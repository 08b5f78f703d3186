"""Checks for Lab 4 (data parallelism): every answer against one process on the whole batch.

Each check runs the function under test on P in-process ranks
(:func:`~minidist.labkit.lab02.run_ranks`), with the library's own data
parallelism **blocked** (:data:`LIBRARY_DATA_PARALLEL`: ``DataParallel``,
its bucket planner and buckets, its parameter broadcast), and compares with a
single-process reference computed by the check before anything is blocked:

1. averaged gradients: every rank's ``p.grad`` equals the gradient of the
   mean loss over the *global* batch (all ranks' samples), from one process;
2. buckets: the plan equals the library's planner's, the averages as in 1,
   and the transport's counters equal those of one ``comm.allreduce`` per
   bucket (an answer with one allreduce per tensor sends more messages);
3. equivalence: P ranks with batch b, k SGD steps, end with the parameters
   one process reaches with batch P·b; each rank starts from *different*
   weights (so rank 0's must be broadcast) and may read only b rows a step;
4. learning-rate schedule: values against ``optim.schedules.linear_scaling``;
5. straggler: a plausibility check of a recorded timeline (the slow rank
   computes longer, everyone else waits about as long).

The library's ``comm.allreduce`` and ``comm.broadcast`` stay allowed: this
lab is about *using* the collective (Lab 3 was about writing it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.comm import allreduce
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import expect, expect_close
from minidist.labkit.lab02 import run_ranks
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD
from minidist.optim.schedules import linear_scaling
from minidist.parallel.buckets import plan_buckets as library_planner
from minidist.parallel.timing import KINDS, LANES

LIBRARY_DATA_PARALLEL = (
    "minidist.parallel.ddp.DataParallel.forward",  # __init__ calls super(): not blockable
    "minidist.parallel.ddp.DataParallel._reduce",
    "minidist.parallel.ddp.broadcast_parameters",
    "minidist.parallel.buckets.plan_buckets",
    "minidist.parallel.buckets.Bucket.__init__",
)
LIBRARY_SCHEDULES = (
    "minidist.optim.schedules.scaled_lr",
    "minidist.optim.schedules.linear_scaling",
    "minidist.optim.schedules.with_warmup",
    "minidist.optim.schedules.linear_warmup",
)
MB = 1 << 20


class CountingMLP(MLP):
    """An MLP (float64, weights from ``seed``) that notes the rows of each forward call."""

    def __init__(self, sizes: list[int], seed: int) -> None:
        super().__init__(list(sizes), dtype=np.float64, rng=np.random.default_rng(seed))
        object.__setattr__(self, "rows_seen", [])

    def forward(self, x: Any) -> Any:
        self.rows_seen.append(len(x))
        return super().forward(x)


def make_data(rows: int, sizes: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` random inputs of ``sizes[0]`` features and labels in ``range(sizes[-1])``."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, sizes[0])), rng.integers(0, sizes[-1], rows)


def mean_loss(model: Any, x: np.ndarray, y: np.ndarray) -> Any:
    """Mean cross-entropy of ``model`` on the rows ``x``, labels ``y``."""
    return cross_entropy(model(Tensor(x)), y)


def reference_average(model: Any, c: Any) -> None:
    """Task 1's answer, given to later tasks so they do not depend on yours: each gradient
    summed over the ranks with ``comm.allreduce``, divided by P, in place."""
    for p in model.parameters():
        # communication: this parameter's gradient, summed over all ranks
        p.grad = allreduce(p.grad, c) / c.size


def grads_of(params: Any) -> list[np.ndarray | None]:
    """Copies of the ``.grad`` of each of ``params`` (None where there is none)."""
    return [None if p.grad is None else np.array(p.grad) for p in params]


def expect_same_arrays(what: str, got: list[Any], expected: list[np.ndarray],
                       rtol: float = 1e-9, atol: float = 1e-12) -> None:
    """Two lists of parameter-shaped arrays, element by element."""
    __tracebackhide__ = True
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        expect_close(f"{what} of parameter {i}", g, e, rtol=rtol, atol=atol)


# --- Task 1: average the gradients after backward ------------------------------------------
def check_average_gradients(average_gradients: Callable[[Any, Any], None], world_size: int,
                            batch_per_rank: int, sizes: list[int], seed: int = 0,
                            block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """Rank r runs backward on rows r·b..(r+1)·b-1, then ``average_gradients(model, c)``:
    every rank's gradients must be one process's on all P·b rows."""
    __tracebackhide__ = True
    what = f"average_gradients, P = {world_size}, b = {batch_per_rank}, MLP {sizes}"
    x, y = make_data(world_size * batch_per_rank, sizes, seed)
    reference = CountingMLP(sizes, seed)
    mean_loss(reference, x, y).backward()

    def body(c: Any) -> list[np.ndarray]:
        model = CountingMLP(sizes, seed)
        rows = slice(c.rank * batch_per_rank, (c.rank + 1) * batch_per_rank)
        mean_loss(model, x[rows], y[rows]).backward()
        average_gradients(model, c)
        return grads_of(model.parameters())

    results, _ = run_ranks(body, world_size, what, block)
    for rank, grads in enumerate(results):
        expect_same_arrays(f"{what}: rank {rank}'s averaged gradient", grads,
                           grads_of(reference.parameters()))


# --- Task 2: buckets -----------------------------------------------------------------------
def fake_params(shapes: list[tuple[int, ...]], grads: np.ndarray | None = None) -> list[Any]:
    """Tensors of ``shapes`` (float64) whose ``.grad`` is cut from the flat ``grads``."""
    params, offset = [], 0
    for shape in shapes:
        p = Tensor(np.zeros(shape), requires_grad=True)
        if grads is not None:
            p.grad = grads[offset:offset + p.size].reshape(shape).copy()
            offset += p.size
        params.append(p)
    return params


def library_plan(shapes: list[tuple[int, ...]], bucket_bytes: int) -> list[list[int]]:
    """The library's plan with one capacity of ``bucket_bytes`` for every bucket."""
    return library_planner(fake_params(shapes), bucket_bytes / MB, bucket_bytes / MB)


def check_bucket_plan(plan_buckets: Callable[[list[Any], int], list[list[int]]],
                      shapes: list[tuple[int, ...]], bucket_bytes: int,
                      block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """The plan of float64 tensors of ``shapes`` must be the library's, bucket by bucket."""
    __tracebackhide__ = True
    what = f"plan_buckets, {len(shapes)} tensors of {shapes}, B = {bucket_bytes} bytes"
    expected = library_plan(shapes, bucket_bytes)
    with blocked(*block):
        got = plan_buckets(fake_params(shapes), bucket_bytes)
    got = [[int(i) for i in bucket] for bucket in got]
    for k, (g, e) in enumerate(zip(got, expected, strict=False)):
        expect(g == e, f"{what}: bucket {k} holds tensors {g}, expected {e} (buckets fill "
               "from the last tensor backwards, a new one when the next would not fit)")
    expect(len(got) == len(expected), f"{what}: {len(got)} buckets, expected {len(expected)}: "
           f"{expected}")


def traffic_of_allreduces(world_size: int, lengths: list[int], check: bool) -> list[Any]:
    """Each rank's counters after one ``comm.allreduce`` of each float64 length."""
    def body(c: Any) -> None:
        for n in lengths:
            allreduce(np.zeros(n), c, check=check)

    return run_ranks(body, world_size, "reference allreduces", ())[1]


def check_bucketed_allreduce(allreduce_in_buckets: Callable[[list[Any], Any, int], None],
                             world_size: int, shapes: list[tuple[int, ...]],
                             bucket_bytes: int, seed: int = 0,
                             block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """Every ``p.grad`` becomes the mean over the ranks, with one allreduce per bucket.

    Traffic: each rank's messages and bytes sent equal those of one default
    ``comm.allreduce`` (with or without its agreement check) per bucket of the plan.
    """
    __tracebackhide__ = True
    what = (f"allreduce_in_buckets, P = {world_size}, {len(shapes)} tensors, "
            f"B = {bucket_bytes} bytes")
    total = sum(int(np.prod(s)) for s in shapes)
    grads = np.random.default_rng(seed).standard_normal((world_size, total))
    plan = library_plan(shapes, bucket_bytes)
    sizes = [int(np.prod(s)) for s in shapes]
    lengths = [sum(sizes[i] for i in bucket) for bucket in plan]
    expected = [traffic_of_allreduces(world_size, lengths, check) for check in (True, False)]
    per_tensor = traffic_of_allreduces(world_size, sizes, True)

    def body(c: Any) -> list[np.ndarray]:
        params = fake_params(shapes, grads[c.rank])
        allreduce_in_buckets(params, c, bucket_bytes)
        return grads_of(params)

    results, stats = run_ranks(body, world_size, what, block)
    mean = fake_params(shapes, grads.mean(axis=0))
    for rank, got in enumerate(results):
        expect_same_arrays(f"{what}: rank {rank}'s averaged gradient", got, grads_of(mean))
    got = [(s.messages_sent, s.bytes_sent) for s in stats]
    options = [[(s.messages_sent, s.bytes_sent) for s in e] for e in expected]
    r = next((r for r in range(world_size) if got[r] != options[0][r]), 0)  # first odd rank
    expect(got in options, f"{what}: rank {r} sent {got[r][0]} messages, {got[r][1]} bytes; "
           f"one comm.allreduce per bucket ({len(plan)} bucket(s) of {lengths} values) sends "
           f"{options[0][r][0]} messages, {options[0][r][1]} bytes (one per tensor would send "
           f"{per_tensor[r].messages_sent})")


# --- Task 3: P ranks with batch b equal one process with batch P·b -------------------------
def check_equivalence(train_data_parallel: Callable[..., Any], world_size: int,
                      batch_per_rank: int, steps: int, lr: float, sizes: list[int],
                      seed: int = 0, block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> None:
    """Rank r's model starts from seed ``seed + r``; after ``train_data_parallel`` every rank
    must hold the weights of one process (seed ``seed``) after ``steps`` SGD steps on rows
    t·B..(t+1)·B-1, B = P·b, each rank running one forward of b rows per step. The check
    passes ``average`` (Task 1's answer, the library's) so this task stands alone."""
    __tracebackhide__ = True
    what = (f"train_data_parallel, P = {world_size}, b = {batch_per_rank}, {steps} steps, "
            f"lr = {lr:g}")
    global_batch = world_size * batch_per_rank
    x, y = make_data(global_batch * steps, sizes, seed)
    reference = CountingMLP(sizes, seed)
    optimizer = SGD(reference.parameters(), lr=lr)
    for t in range(steps):
        rows = slice(t * global_batch, (t + 1) * global_batch)
        optimizer.zero_grad()
        mean_loss(reference, x[rows], y[rows]).backward()
        optimizer.step()

    def body(c: Any) -> tuple[list[np.ndarray], list[int]]:
        model = CountingMLP(sizes, seed + c.rank)
        train_data_parallel(c, model, x, y, batch_per_rank, steps, lr, reference_average)
        return [np.array(p.data) for p in model.parameters()], model.rows_seen

    results, _ = run_ranks(body, world_size, what, block)
    expected = [p.data for p in reference.parameters()]
    for rank, (params, rows_seen) in enumerate(results):
        expect(rows_seen == [batch_per_rank] * steps, f"{what}: rank {rank} ran forward on "
               f"{rows_seen} rows; each rank should run one forward of b = {batch_per_rank} "
               f"rows per step, {steps} steps")
        expect_same_arrays(f"{what}: rank {rank}'s final weights", params, expected,
                           rtol=1e-8, atol=1e-10)


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


# --- Task 5: a straggler --------------------------------------------------------------------
def check_straggler(timed_steps: Callable[..., Any], world_size: int, slow_rank: int,
                    delay: float, steps: int = 3, sizes: tuple[int, ...] = (6, 8, 3),
                    block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> list[Any]:
    """``timed_steps(c, model, x, y, steps, slow_rank, delay, average)`` returns a trace
    ``[(kind, lane, start, end), ...]``. Plausible: ``steps`` compute intervals per rank; the
    slow rank's compute at least ``steps·delay``; every other rank waits (wait + comm) at
    least half of that, the slow rank less than half; every rank ends with the same
    weights. Returns the traces (for ``plot_timeline``)."""
    __tracebackhide__ = True
    what = f"timed_steps, P = {world_size}, rank {slow_rank} {delay:g} s slower per step"
    x, y = make_data(world_size * 4, list(sizes), seed=world_size)

    def body(c: Any) -> tuple[list[Any], list[np.ndarray]]:
        model = CountingMLP(list(sizes), seed=0)
        trace = timed_steps(c, model, x, y, steps, slow_rank, delay, reference_average)
        return [tuple(i) for i in trace], [np.array(p.data) for p in model.parameters()]

    results, _ = run_ranks(body, world_size, what, block)
    needed = steps * delay
    for rank, (trace, params) in enumerate(results):
        for kind, lane, start, end in trace:
            expect(kind in KINDS and lane in LANES and 0 <= start <= end,
                   f"{what}: rank {rank} recorded {(kind, lane, start, end)}; intervals are "
                   f"(kind in {KINDS}, lane in {LANES}, start, end) with 0 <= start <= end")
        seconds = {k: sum(e - s for kind, _, s, e in trace if kind == k) for k in KINDS}
        computes = sum(1 for kind, *_ in trace if kind == "compute")
        expect(computes == steps, f"{what}: rank {rank} recorded {computes} compute "
               f"intervals, expected one per step ({steps})")
        waited = seconds["wait"] + seconds["comm"]
        if rank == slow_rank:
            expect(seconds["compute"] >= needed, f"{what}: the slow rank computed for "
                   f"{seconds['compute']:.3f} s in all, expected at least {needed:.3f} s")
            expect(waited < needed / 2, f"{what}: the slow rank waited and communicated "
                   f"{waited:.3f} s; it is the last to arrive and should hardly wait")
        else:
            expect(waited >= needed / 2, f"{what}: rank {rank} waited and communicated only "
                   f"{waited:.3f} s, but the slow rank computed {needed:.3f} s longer")
        expect_same_arrays(f"{what}: rank {rank}'s weights after training (vs rank 0's)",
                           params, results[0][1], rtol=0, atol=0)
    return [trace for trace, _ in results]
