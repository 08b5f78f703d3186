"""Lab 4, Task 5: a straggler, checked exactly on the in-process transport's modelled clock.

A student's ``timed_steps`` records ``(kind, lane, start, end)`` intervals
with ``TraceRecorder(c.rank, clock=lambda: c.stats.clock)``. On that clock
forward and backward take no time, the slow rank's ``c.compute(delay)``
takes exactly ``delay``, a barrier lets every rank go at the time the last
one arrives, and an allreduce costs what the network model says. So each
step's three intervals are known exactly, on any machine, under any load:

- compute: ``delay`` on the slow rank, 0 on the others;
- wait: from the rank's arrival at the barrier to the last rank's arrival
  (the slow rank's, ``delay`` after the others'): every rank's wait ends at
  the same time;
- comm: the modelled cost of ``average(model, c)``, measured on a fresh run.

The trace is the student's record, so each interval is also held to the
operations the grader did for that rank (``expect_recorded_operations``):
the grader's barriers (``ranks.ClockLog``) and averages (``GradientAverager``)
note when they began and ended, and each wait and comm interval must be
one of them, each compute the time between. A trace written without doing
the work in its place does not match.

Wall-clock timelines are only *shown* (Part B of the lab), never graded:
on a shared machine they are noisy.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.labkit.checks import expect
from minidist.labkit.lab04 import (
    LIBRARY_DATA_PARALLEL,
    expect_own_rows_averaged,
    expect_same_arrays,
)
from minidist.labkit.lab04_ranks import (
    GradientAverager,
    averaging_with,
    gradients_on,
    make_data,
    mean_loss,
    seeded_mlp,
    timed_on_rank,
)
from minidist.labkit.ranks import ClockLog, run_ranks
from minidist.labkit.remote import on_student
from minidist.optim import SGD

STEP = (("compute", "main"), ("wait", "main"), ("comm", "main"))  # one step's intervals
ROWS_PER_RANK = 4


def modelled_cost_of_average(world_size: int, sizes: list[int], steps: int) -> list[list[float]]:
    """Per rank, per step: modelled seconds of the ``average`` that ``timed_steps`` gets,
    right after a barrier."""
    def body(c: Any) -> list[float]:
        model = seeded_mlp(sizes, seed=0)
        mean_loss(model, *make_data(ROWS_PER_RANK, sizes, seed=c.rank)).backward()
        average, costs = averaging_with(GradientAverager(c)), []
        for _ in range(steps):
            c.barrier()
            start = c.stats.clock
            average(model, c)
            costs.append(c.stats.clock - start)
        return costs

    return run_ranks(body, world_size, "the cost of average", ())[0]


def check_straggler(timed_steps: Callable[..., Any], world_size: int, slow_rank: int,
                    delay: float, steps: int = 3, sizes: tuple[int, ...] = (6, 8, 3),
                    block: tuple[str, ...] = LIBRARY_DATA_PARALLEL) -> list[Any]:
    """``timed_steps(c, model, x, y, steps, slow_rank, delay, average)`` returns a trace
    ``[(kind, lane, start, end), ...]`` on the modelled clock. Each step: compute, wait,
    comm, lasting what the module docstring says; every rank averaged, once a step, the
    gradient of its own rows (the grader's ``GradientAverager`` sees it) and ends with one
    process's weights. Returns the traces."""
    __tracebackhide__ = True
    what = f"timed_steps, P = {world_size}, rank {slow_rank} {delay:g} s slower per step"
    # one row more than P ranks share evenly (P > 1): b = len(x) // P rows a rank, the text's
    # r·b onwards (a split that gives the extra row to someone trains on other rows)
    b = ROWS_PER_RANK
    x, y = make_data(world_size * b + (world_size > 1), list(sizes), seed=world_size)
    reference = seeded_mlp(list(sizes), seed=0)  # one process: SGD, lr 0.1, the P·b rows
    optimizer = SGD(reference.parameters(), lr=0.1)
    own = []  # own[t][r]: the gradient of rank r's rows at step t's weights
    for _ in range(steps):
        own.append([gradients_on(reference, x[r * b:(r + 1) * b], y[r * b:(r + 1) * b])
                    for r in range(world_size)])
        optimizer.zero_grad()
        mean_loss(reference, x[:world_size * b], y[:world_size * b]).backward()
        optimizer.step()
    comm_costs = modelled_cost_of_average(world_size, list(sizes), steps)

    def body(c: Any) -> tuple[list[Any], list[np.ndarray], GradientAverager, ClockLog]:
        averager, logged = GradientAverager(c), ClockLog(c)
        trace, weights = on_student(timed_on_rank, timed_steps, logged, averager, list(sizes),
                                    x, y, steps, slow_rank, delay)
        return trace, weights, averager, logged

    results, _ = run_ranks(body, world_size, what, block)
    traces = [trace for trace, _, _, _ in results]
    for rank, trace in enumerate(traces):
        kinds = [tuple(interval[:2]) for interval in trace]
        expect(kinds == list(STEP) * steps, f"{what}: rank {rank} recorded {kinds}; each of "
               f"the {steps} steps records three intervals on lane 'main', in this order: "
               "compute, wait, comm")
    # seconds[kind][rank][t] on the modelled clock; each claim is checked on every rank in turn
    seconds = {kind: [[end - start for k, _, start, end in trace if k == kind]
                      for trace in traces] for kind, _ in STEP}
    computes = [[delay if rank == slow_rank else 0.0] * steps for rank in range(world_size)]
    arrivals = [[start for k, _, start, _ in trace if k == "wait"] for trace in traces]
    waits = [[max(at[t] for at in arrivals) - mine[t] for t in range(steps)] for mine in arrivals]
    claims = [
        ("compute", computes, " on the modelled clock, expected {e:g} s: only the slow rank adds "
         "c.compute(delay) inside compute (time.sleep does not move the modelled clock; "
         "record with TraceRecorder(c.rank, clock=lambda: c.stats.clock))"),
        ("wait", waits, ", expected {e:.9g} s: c.barrier() inside "
         "wait holds every rank until the last one arrives, the slow rank, delay later"),
        ("comm", comm_costs, ", expected {e:.9g} s, the modelled cost of one average(model, c): "
         "call it once per step, inside comm, and nothing else there"),
    ]
    for kind, expected, why in claims:
        for rank, t in itertools.product(range(world_size), range(steps)):
            got, e = seconds[kind][rank][t], expected[rank][t]
            expect(_same(got, e), f"{what}: rank {rank}'s {kind} in step {t} lasted {got:.9g} "
                   f"s{why.format(e=e)}")
    for rank, (_, params, _, _) in enumerate(results):
        expect_same_arrays(f"{what}: rank {rank}'s weights after training (one process: "
                           f"{steps} SGD steps, lr 0.1, on the first P·b = {world_size * b} "
                           "rows, rank r's from r·b)", params,
                           [p.data for p in reference.parameters()])
    for rank, (trace, _, averager, logged) in enumerate(results):
        expect_own_rows_averaged(what, rank, averager.received,
                                 [own[t][rank] for t in range(steps)],
                                 lambda t, r=rank: f"x[{r * b}:{(r + 1) * b}]", b)
        expect_recorded_operations(what, rank, trace, logged.barriers, averager.spans)
    return traces


def expect_recorded_operations(what: str, rank: int, trace: list[Any],
                               barriers: list[tuple[float, float]],
                               averages: list[tuple[float, float]]) -> None:
    """Rank ``rank``'s ``trace`` (three intervals a step, already checked in kind) records
    the operations the grader did for it, on the modelled clock since the end of the
    first barrier (``recorder.start(c)``'s): each wait is a barrier's call and return,
    each comm an average's, each compute the time from the step before (or 0) to the
    barrier."""
    __tracebackhide__ = True
    steps = len(averages)
    expect(len(barriers) == steps + 1, f"{what}: rank {rank} called c.barrier() "
           f"{len(barriers)} times; recorder.start(c) calls it once, and each of the "
           f"{steps} steps once, inside wait")
    origin, done = barriers[0][1], 0.0
    for t in range(steps):
        (wait_start, wait_end), (comm_start, comm_end) = barriers[t + 1], averages[t]
        seen = [("compute", done, wait_start - origin, "the end of the step before (time 0 in "
                 "step 0) and the call of c.barrier()"),
                ("wait", wait_start - origin, wait_end - origin, "c.barrier() called and "
                 "returning"),
                ("comm", comm_start - origin, comm_end - origin, "average(model, c) called "
                 "and returning")]
        for (kind, start, end, between), interval in zip(seen, trace[3 * t:3 * t + 3],
                                                         strict=True):
            expect(_same(interval[2], start) and _same(interval[3], end),
                   f"{what}: rank {rank}'s {kind} in step {t} is recorded from "
                   f"{interval[2]:.9g} to {interval[3]:.9g} s; the grader saw {between} at "
                   f"{start:.9g} and {end:.9g} s (since recorder.start(c)'s barrier)")
        done = comm_end - origin


def _same(got: float, expected: float) -> bool:
    """Equal on the modelled clock, up to the rounding of adding times."""
    return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12)
