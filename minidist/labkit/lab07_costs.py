"""Lab 7, Tasks 4-5: what a pipeline costs, in time (the bubble) and in memory (activations).

4. ``bubble``: the student's ``timed_pipeline`` trains one step through
   ``Pipeline`` with a declared work per step, timed on the in-process
   transport's modelled clock: its trace must be the library's own run's, to
   the last bit (the same on any machine, under any load), and each step of
   it must hold the work the grader's rank did for it (``ranks.ClockLog``
   notes when each barrier and ``c.compute`` began and ended): a trace
   returned without running the steps on the rank's communicator does not.
   Then the
   student's ``bubbles(traces)`` against each stage's idle share of the span
   computed here, on that run's traces and on traces made by hand (rows that
   end at different times: the span is the whole step's, not the row's).
5. ``checkpoint``: the student's ``checkpoint_segments(modules, segments, x)``
   on an MLP: the loss and every gradient must equal those without
   checkpointing (float64); each module's forward must run twice if its run is
   checkpointed (once more in backward) and once in the last run, the runs cut
   by ``chunk_bounds`` (checkpointing the last run too, or cutting the runs
   otherwise, fails there, named); and the most activation bytes the graph
   keeps at once (``md.autograd.saved_bytes``) must fall to what checkpointing
   the same segments with the library gives: an answer that keeps everything,
   or cuts the graph instead of recomputing it, fails. ``check_checkpoint_memory``
   makes the same claim on an MLP whose activations weigh megabytes, in the
   memory the operating system counts for the process that runs the answer
   (``resident.py``: when graded, the kernel's, read by the grader): its peak
   must stay nearer the library's checkpointed run than the plain one.

While a task is checked, the library's answers to it are blocked.

A model is not data, so the student's functions run through probes
(``timed_on_rank``, ``checkpointed_answer``): when the lab is graded they
build the MLP in the student's kernel from the sizes and seed the check
chose, and return the trace, or the loss, gradients and peak saved bytes;
the ranks, their modelled clock and the references stay in the grader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.autograd.checkpoint import checkpoint_sequential
from minidist.autograd.memory import saved_bytes
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect
from minidist.labkit.lab07 import expect_one_process, make_batch
from minidist.labkit.ranks import ClockLog, run_ranks
from minidist.labkit.remote import on_student
from minidist.labkit.resident import memory_of
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.parallel.pipeline import Pipeline
from minidist.util import chunk_bounds

LIBRARY_BUBBLE = ("lab07_bubble",)
LIBRARY_CHECKPOINT = ("lab07_checkpoint",)
WIDTH = 8  # the timed MLP: [8] * (layers + 1)


# --- Task 4: the bubble, measured ------------------------------------------------------------
def timed_run(timed_pipeline: Callable[..., Any], stages: int, micro_batches: int,
              schedule: str, forward_s: float, backward_s: float, what: str,
              block: tuple[str, ...] = ()) -> list[tuple[Any, ClockLog]]:
    """``timed_pipeline(c, model, x, y, schedule, M, forward_s, backward_s)`` on K ranks:
    per rank, what it returned and the log of the barriers and work the grader did."""
    x, y = make_batch((WIDTH,) * 2, 4 * micro_batches, 0)

    def body(c: Any) -> Any:
        logged = ClockLog(c)
        trace = on_student(timed_on_rank, timed_pipeline, logged, stages, x, y, schedule,
                           micro_batches, forward_s, backward_s)
        return trace, logged

    return run_ranks(body, stages, what, block)[0]


def timed_on_rank(timed_pipeline: Callable[..., Any], c: Any, stages: int, x: np.ndarray,
                  y: np.ndarray, schedule: str, micro_batches: int, forward_s: float,
                  backward_s: float) -> Any:
    """Probe: ``timed_pipeline`` on this rank with the MLP of ``2·stages`` layers (float64,
    weights from seed 0); what it returned."""
    model = MLP([WIDTH] * (2 * stages + 1), dtype=np.float64, rng=0)
    return timed_pipeline(c, model, x, y, schedule, micro_batches, forward_s, backward_s)


def library_timed_pipeline(c: Any, model: Any, x: Any, y: Any, schedule: str,
                           micro_batches: int, forward_s: float, backward_s: float) -> Any:
    """Task 4's answer: each step declares its work; the trace is on the modelled clock."""
    def work(step, rows):
        return forward_s if step.phase == "F" else backward_s

    pipe = Pipeline(model, c, micro_batches, schedule=schedule, work=work,
                    clock=lambda: c.stats.clock)
    pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
    return pipe.last_run.trace


def idle_shares(traces: list[list[tuple[str, float, float]]]) -> list[float]:
    """Each row's idle share of the whole span (the check's own arithmetic)."""
    span = max(end for trace in traces for _, _, end in trace)
    return [float(1 - sum(end - start for _, start, end in trace) / span) for trace in traces]


def hand_made_traces() -> list[list[tuple[str, float, float]]]:
    """Three rows that start and end at different times, with gaps inside; the middle
    one ends last (in a pipeline's step, rank 0 does)."""
    return [[("F0", 0.0, 1.0), ("F1", 1.0, 2.0), ("B0", 5.0, 7.0), ("B1", 8.0, 10.0)],
            [("F0", 1.0, 2.0), ("B0", 3.0, 5.0), ("F1", 5.5, 6.5), ("B1", 8.5, 11.0)],
            [("F0", 2.0, 3.0), ("B0", 3.0, 4.0)]]


def check_bubble(timed_pipeline: Callable[..., Any], bubbles: Callable[..., Any],
                 stages: int, micro_batches: int, schedule: str = "1f1b",
                 forward_s: float = 1e-3, backward_s: float = 2e-3,
                 block: tuple[str, ...] = LIBRARY_BUBBLE) -> None:
    """The answer's trace is the library's run's, exactly; its ``bubbles`` is each
    stage's idle share of the span."""
    __tracebackhide__ = True
    what = (f"timed_pipeline, {stages} stages, {micro_batches} micro-batches, {schedule}, "
            f"forward {forward_s * 1e3:g} ms, backward {backward_s * 1e3:g} ms")
    expected = [trace for trace, _ in timed_run(library_timed_pipeline, stages, micro_batches,
                                                schedule, forward_s, backward_s, what)]
    got = timed_run(timed_pipeline, stages, micro_batches, schedule, forward_s, backward_s,
                    what, block)
    for k, ((trace, logged), reference) in enumerate(zip(got, expected, strict=True)):
        steps = [s for s, *_ in reference]
        expect(isinstance(trace, list) and [s for s, *_ in trace] == steps,
               f"{what}: rank {k} returned {trace!r:.80}; expected its trace, "
               f"pipe.last_run.trace: (step, start, end) for its steps {' '.join(steps)}")
        for (step, start, end), (_, at, to) in zip(trace, reference, strict=True):
            expect(np.isclose(start, at, rtol=1e-9, atol=1e-12)
                   and np.isclose(end, to, rtol=1e-9, atol=1e-12),
                   f"{what}: rank {k}'s {step} ran from {start * 1e3:.4g} to {end * 1e3:.4g} "
                   f"ms, expected {at * 1e3:.4g} to {to * 1e3:.4g} ms on the modelled clock: "
                   "declare forward_s for each forward and backward_s for each backward "
                   "(Pipeline's work), and time with clock=lambda: c.stats.clock")
        expect_steps_did_their_work(what, k, trace, logged)
    for name, traces in (("the traces of that run", expected),
                         ("these traces", hand_made_traces())):
        with blocked(*block):
            idle = bubbles([list(t) for t in traces])
        shown = "" if traces is expected else f" {traces}"
        right = idle_shares(traces)
        expect(isinstance(idle, list | tuple | np.ndarray) and len(idle) == len(right)
               and np.allclose(np.asarray(idle, dtype=float), right, rtol=1e-9, atol=1e-12),
               f"bubbles on {name}{shown} returned {idle!r}, expected "
               f"{[round(b, 6) for b in right]}: each row's idle share of the span, "
               "1 - (its busy time) / (the latest end of any row; every row starts at 0)")


def expect_steps_did_their_work(what: str, rank: int, trace: list[tuple[str, float, float]],
                                logged: ClockLog) -> None:
    """Each step of rank ``rank``'s ``trace`` (times since ``Pipeline``'s origin: the end of
    the barrier before its first step) holds one of the grader's compute spans, in order:
    its work was done there, on the rank's communicator."""
    __tracebackhide__ = True
    computes = logged.computes
    expect(len(computes) == len(trace) and bool(logged.barriers),
           f"{what}: rank {rank}'s trace has {len(trace)} steps, but its communicator did the "
           f"declared work of {len(computes)}: train one step through Pipeline on c, with "
           "work=, so that each step's work is done there")
    first = computes[0][0] if computes else float("inf")
    origin = max((end for _, end in logged.barriers if end <= first), default=0.0)
    for (step, start, end), (began, ended) in zip(trace, computes, strict=True):
        inside = start - 1e-12 <= began - origin and ended - origin <= end + 1e-12
        expect(inside, f"{what}: rank {rank}'s {step} is recorded from {start * 1e3:.4g} to "
               f"{end * 1e3:.4g} ms, but the grader did its work from "
               f"{(began - origin) * 1e3:.4g} to {(ended - origin) * 1e3:.4g} ms: return the "
               "trace of the run you trained, pipe.last_run.trace")


# --- Task 5: gradient checkpointing -------------------------------------------------------
def checkpointed_step(forward: Callable[[Any], Tensor], sizes: list[int], batch: int,
                      seed: int) -> tuple[float, dict[str, np.ndarray | None], int]:
    """Loss, gradients and peak saved-activation bytes of one step through ``forward``."""
    model = MLP(sizes, dtype=np.float64, rng=seed)
    x, y = make_batch(tuple(sizes), batch, seed)
    with saved_bytes() as saved:
        loss = cross_entropy(forward(model, Tensor(x)), y)
        loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}, saved.peak


def checkpointed_answer(checkpoint_segments: Callable[..., Any], segments: int,
                        sizes: list[int], batch: int, seed: int
                        ) -> tuple[float, dict, int, list[int]]:
    """Probe: ``checkpointed_step`` through ``checkpoint_segments(modules, segments, x)``;
    and how many times each module's forward ran in the step."""
    calls: list[int] = []

    def forward(model: Any, x: Tensor) -> Tensor:
        modules = list(model)
        calls.extend([0] * len(modules))
        for i, module in enumerate(modules):
            module.forward = counted(module.forward, calls, i)
        return checkpoint_segments(modules, segments, x)

    return (*checkpointed_step(forward, sizes, batch, seed), calls)


def counted(forward: Callable[..., Any], calls: list[int], i: int) -> Callable[..., Any]:
    """``forward``, adding 1 to ``calls[i]`` each time it runs."""
    def run(*args: Any, **kwargs: Any) -> Any:
        calls[i] += 1
        return forward(*args, **kwargs)
    return run


def expect_forward_calls(what: str, calls: list[int], segments: int) -> None:
    """Each module of a checkpointed run ran forward twice (once more in backward), each of
    the last run's once; the runs cut by ``chunk_bounds(len(modules), segments)``."""
    __tracebackhide__ = True
    n = len(calls)
    start = chunk_bounds(n, segments)[-1][0]  # the last run: modules start..n-1
    expected = [2] * start + [1] * (n - start)
    if calls == expected:
        return
    ones = n - next((i for i in range(n - 1, -1, -1) if calls[i] != 1), -1) - 1
    shape = all(c == 2 for c in calls[:n - ones]) and ones < n
    hint = ("the last run ran forward twice too: it runs plainly, once (checkpointing it "
            "would only recompute it at once)" if ones == 0 and shape else
            f"the last run here is modules {n - ones}..{n - 1}, where chunk_bounds({n}, "
            f"{segments}) makes it modules {start}..{n - 1}: cut the runs with chunk_bounds("
            "len(modules), segments), whose first runs are the longer ones" if shape else
            "no module ran twice: nothing was recomputed in backward" if set(calls) == {1}
            else "each module of a checkpointed run runs forward twice (under no_grad, then "
            "again in backward), each of the last run once")
    raise CheckFailed(f"{what}: the step ran the forwards of {times(calls)}; checkpointing "
                      f"each run but the last runs those of {times(expected)}: {hint}")


def times(calls: list[int]) -> str:
    """``[2, 2, 1]`` as "modules 0..1 twice, 2 once"."""
    said, start = [], 0
    for i in range(1, len(calls) + 1):
        if i == len(calls) or calls[i] != calls[start]:
            count = {1: "once", 2: "twice"}.get(calls[start], f"{calls[start]} times")
            said.append(f"{start}..{i - 1} {count}" if i - 1 > start else f"{start} {count}")
            start = i
    return "modules " + ", ".join(said)


def check_checkpointing(checkpoint_segments: Callable[..., Any], layers: int, segments: int,
                        width: int = 8, batch: int = 16, seed: int = 0,
                        block: tuple[str, ...] = LIBRARY_CHECKPOINT) -> None:
    """An MLP of ``layers`` Linear layers, its 2·layers - 1 modules cut into ``segments``:
    one process's gradients, and no more saved bytes than the library's checkpoints."""
    __tracebackhide__ = True
    sizes = [width] * layers + [3]
    what = (f"checkpoint_segments on an MLP of {layers} layers ({2 * layers - 1} modules), "
            f"{segments} segments, a batch of {batch}")
    loss, grads, plain = checkpointed_step(lambda model, x: model(x), sizes, batch, seed)
    *_, least = checkpointed_step(
        lambda model, x: checkpoint_sequential(list(model), segments, x), sizes, batch, seed)
    with blocked(*block):
        got_loss, got_grads, peak, calls = on_student(checkpointed_answer, checkpoint_segments,
                                                      segments, sizes, batch, seed)
    expect_one_process(what, got_loss, got_grads, (loss, grads), ": pass each segment but "
                       "the last through md.checkpoint, which recomputes it in backward; a "
                       "segment run under no_grad alone cuts the graph")
    expect_forward_calls(what, calls, segments)
    expect(peak <= least, f"{what}: the graph kept up to {peak} bytes of activations at once; "
           f"without checkpointing it keeps {plain}, with each segment but the last "
           f"checkpointed {least}: pass each segment but the last through checkpoint(run, x), "
           "so that only its input is kept")


def check_checkpoint_memory(checkpoint_segments: Callable[..., Any], layers: int = 16,
                            segments: int = 4, width: int = 64, batch: int = 8192,
                            block: tuple[str, ...] = LIBRARY_CHECKPOINT) -> None:
    """The peak resident memory of one step through the student's checkpoints, against this
    process's for the same step without checkpoints and with the library's."""
    __tracebackhide__ = True
    sizes, seed = [width] * layers + [3], 0
    what = (f"checkpoint_segments on an MLP of {layers} layers of {width}, {segments} "
            f"segments, a batch of {batch}")
    grew = {}
    for name, forward in (("plain", lambda model, x: model(x)), ("least", lambda model, x:
                          checkpoint_sequential(list(model), segments, x))):
        with memory_of(forward) as grown:
            loss, grads, _ = checkpointed_step(forward, sizes, batch, seed)
        grew[name] = grown.bytes
    with blocked(*block), memory_of(checkpoint_segments) as grown:
        got_loss, got_grads, *_ = on_student(checkpointed_answer, checkpoint_segments,
                                             segments, sizes, batch, seed)
    expect_one_process(what, got_loss, got_grads, (loss, grads), ": pass each segment but "
                       "the last through md.checkpoint, which recomputes it in backward")
    plain, least = grew["plain"], grew["least"]
    if grown.bytes is None or plain is None or least is None:
        return  # no /proc here: the claim rests on check_checkpointing's saved bytes
    mib = 2 ** 20
    expect(grown.bytes <= (plain + least) / 2, f"{what}: the process running it held up to "
           f"{grown.bytes / mib:.0f} MiB more memory during the step, as the operating system "
           f"counts it; without checkpointing the step takes {plain / mib:.0f} MiB, with the "
           f"library's checkpoints {least / mib:.0f}: keep only each segment's input, and "
           "recompute the segment in backward")
