"""Checks for Lab 7 (pipelines), Tasks 1-3: the stage's exchange and two schedules as data.

1. ``exchange``: the student's ``forward_step`` and ``backward_step`` run a
   schedule's steps on K in-process ranks (a driver of this module plays the
   engine: it hands each step its micro-batch and weights the last stage's
   loss). Three claims: every step receives from and sends to the right
   rank with the right tag (``TaggedLog``); the loss and every gradient equal
   one process's on the whole batch (float64); each rank's bytes, counted by
   the transport, are one activation and one gradient per micro-batch. Each
   step runs through a probe of ``lab07_stages.py``, so that when the lab is
   graded the stage lives in the student's kernel and the ranks, their log
   and their traffic in the grader. A step that posts a message to or from a
   rank that does not exist (before rank 0, after rank K-1: with K = 1 both)
   is named as such.
2. ``gpipe`` and 3. ``1f1b``: the student's schedule (a list of Steps per
   rank) must pass the library's ``check_schedule`` — a schedule that can
   never finish fails there, in a sentence naming the ranks and what each
   waits for, before anything runs — then run through ``Pipeline(schedule=...)``
   to one process's gradients; GPipe runs all forwards before any backward,
   and its backwards last in, first out (the reverse of its forwards), 1F1B
   holds at most K - k micro-batches on stage k; both leave the bubble of the
   formula on a clock where a forward takes 1 and a backward 2.

Every multi-rank run is bounded in time (``run_ranks``), and the in-process
transport turns a deadlock into an error naming the ranks: no check hangs.
While a task is checked, the library's answers to it are blocked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.autograd import Tensor, no_grad
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.lab07_stages import (
    TaggedLog,
    backward_on,
    expect_peers_exist,
    expected_calls,
    forward_on,
    gradients_of,
    stage_of,
    words,
)
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import name_of, on_student
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.parallel.pipeline import (
    Pipeline,
    ScheduleError,
    Step,
    bubble_formula,
    bubbles,
    check_schedule,
    format_schedule,
    make_schedule,
    simulate,
    split_stages,
)
from minidist.util import chunk_bounds

LIBRARY_EXCHANGE = ("lab07_exchange",)
LIBRARY_GPIPE = ("lab07_gpipe",)
LIBRARY_1F1B = ("lab07_1f1b",)
SIZES = (6, 8, 8, 8, 8, 3)  # 5 Linear layers and 4 ReLUs: 9 modules to cut into stages


def make_batch(sizes: tuple[int, ...], batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded float64 batch for ``MLP(sizes)``: inputs and class ids."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, sizes[0])), rng.integers(0, sizes[-1], batch)


def one_process(sizes: tuple[int, ...], x: np.ndarray, y: np.ndarray,
                seed: int) -> tuple[float, dict[str, np.ndarray]]:
    """The mean loss over the whole batch and every gradient, by name, in one process."""
    model = MLP(list(sizes), dtype=np.float64, rng=seed)
    loss = cross_entropy(model(Tensor(x)), y)
    loss.backward()
    return loss.item(), {name: p.grad.copy() for name, p in model.named_parameters()}


def expect_one_process(what: str, loss: float, grads: dict[str, Any],
                       expected: tuple[float, dict[str, np.ndarray]], hint: str) -> None:
    """The last rank's loss and the gradients gathered from every rank against one process."""
    __tracebackhide__ = True
    expect(loss is not None and np.isclose(loss, expected[0], rtol=1e-10, atol=1e-12),
           f"{what}: the loss is {loss}, one process on the whole batch gets {expected[0]:.12g}"
           f"{hint}")
    for name, grad in expected[1].items():
        expect(grads.get(name) is not None, f"{what}: parameter {name} has no gradient: "
               f"backward never reached it{hint}")
        expect_close(f"{what}: the gradient of {name} against one process on the whole batch",
                     grads[name], grad, rtol=1e-10, atol=1e-12)


# --- Task 1: the forward and backward exchange ---------------------------------------------
def exchange_schedule(order: str, stages: int, micro_batches: int) -> list[list[Step]]:
    """"gpipe", "1f1b", or "shuffled": GPipe, but stage 1 takes the micro-batches in
    another order than stage 0 sends them (only the tags can match them up)."""
    if order != "shuffled":
        return make_schedule(order, stages, micro_batches)
    if stages < 2:
        raise ValueError(f"the shuffled order needs at least 2 stages, got {stages}")
    schedule = make_schedule("gpipe", stages, micro_batches)
    turned = list(reversed(range(micro_batches)))
    schedule[1] = [Step(1, m, "F") for m in turned] + [Step(1, m, "B") for m in turned]
    return schedule


def check_exchange(forward_step: Callable[..., Any], backward_step: Callable[..., Any],
                   stages: int, micro_batches: int, batch: int = 10, order: str = "gpipe",
                   sizes: tuple[int, ...] = SIZES, seed: int = 0,
                   block: tuple[str, ...] = LIBRARY_EXCHANGE) -> None:
    """``MLP(sizes)`` cut into ``stages`` stages, a batch of ``batch`` rows in
    ``micro_batches`` micro-batches, the steps of ``order``, each through the answer."""
    __tracebackhide__ = True
    what = (f"{stages} stage{'s' * (stages != 1)}, {micro_batches} micro-batches of a batch "
            f"of {batch}, {order} order")
    x, y = make_batch(sizes, batch, seed)
    rows = [slice(lo, hi) for lo, hi in chunk_bounds(batch, micro_batches)]
    shapes, h = [], [x[r] for r in rows]  # shapes[k][m]: the input of stage k, micro-batch m
    with no_grad():
        for stage in split_stages(MLP(list(sizes), dtype=np.float64, rng=seed), stages):
            shapes.append([a.shape for a in h])
            h = [stage(Tensor(a)).data for a in h]
    schedule = exchange_schedule(order, stages, micro_batches)

    logs: dict[int, tuple[TaggedLog, list[Step]]] = {}  # each rank's log and steps begun

    def body(c: Any) -> tuple[float | None, dict[str, np.ndarray], list]:
        k, last = c.rank, c.size - 1
        stage = on_student(stage_of, forward_step, sizes, seed, c.size, k)
        log, held, loss, posted = TaggedLog(c), {}, None, []
        logs[k] = (log, [])
        for step in schedule[k]:
            m, before = step.micro, len(log.calls)
            logs[k][1].append(step)
            if step.phase == "F":
                # the loss of micro-batch m on the last rank, weighted by its share of the batch
                labels = y[rows[m]] if k == last else None
                returned, part, held[m] = on_student(
                    forward_on, forward_step, log, stage, m, x[rows[m]] if k == 0 else None,
                    shapes[k][m], labels, len(y[rows[m]]) / batch)
                expect(returned is None, f"{what}: forward_step returned {returned} on rank "
                       f"{k}; it returns (inp, out), the stage's input and output Tensors")
                if part is not None:
                    loss = (loss or 0.0) + part
            else:
                on_student(backward_on, backward_step, log, m, held.pop(m))
            posted.append((step, log.calls[before:]))
        return loss, on_student(gradients_of, stage), posted

    try:
        results, stats = run_ranks(body, stages, what, block)
    except CheckFailed:
        expect_peers_exist(what, stages, logs)
        raise
    for posted in (r[2] for r in results):
        for step, calls in posted:
            name = "forward_step" if step.phase == "F" else "backward_step"
            expect(calls == expected_calls(step, stages - 1),
                   f"{what}: {name} of micro-batch {step.micro} on rank {step.stage} posted "
                   f"{words(calls)}; expected {words(expected_calls(step, stages - 1))}: in "
                   "forward rank k receives from k-1 and sends to k+1 (tag 2m+1), in backward "
                   "it receives from k+1 and sends to k-1 (tag 2m+2); rank 0 reads x, and the "
                   "last rank's output goes into the loss, not to another rank")
    grads = {name: g for r in results for name, g in r[1].items()}
    expect_one_process(what, results[-1][0], grads, one_process(sizes, x, y, seed),
                       ": is each micro-batch's gradient sent back with its own tag?")
    for k, s in enumerate(stats):
        widths = [shapes[j][0][1] for j in (k, k + 1) if 0 < j < stages]
        expected = 8 * sum(r.stop - r.start for r in rows) * sum(widths)
        expect(s.bytes_sent == expected, f"{what}: rank {k} sent {s.bytes_sent} bytes; one "
               f"float64 activation (forward) and one gradient (backward) per micro-batch "
               f"make {expected}: send out.data and inp.grad, nothing else")


# --- Tasks 2 and 3: schedules as data ------------------------------------------------------
def answer_schedule(make: Callable[[int, int], Any], stages: int, micro_batches: int,
                    block: tuple[str, ...]) -> list[list[Step]]:
    """``make(K, M)`` with the library's answer blocked, held to ``check_schedule``."""
    __tracebackhide__ = True
    call = f"{name_of(make)}({stages}, {micro_batches})"
    with blocked(*block):
        schedule = make(stages, micro_batches)
    expect(isinstance(schedule, list) and len(schedule) == stages
           and all(isinstance(steps, list) for steps in schedule),
           f"{call} returned {type(schedule).__name__}; a schedule is a list of K = {stages} "
           "lists, rank k's Steps in order")
    try:
        check_schedule(schedule, micro_batches)
    except ScheduleError as error:
        raise CheckFailed(f"{call} cannot run: {error}") from None
    return schedule


def pipeline_run(schedule: list[list[Step]], micro_batches: int, batch: int,
                 sizes: tuple[int, ...], seed: int, what: str) -> list[int]:
    """Train one step through ``Pipeline(schedule=...)`` on K in-process ranks against
    one process; each stage's most micro-batches held at once (``peak_in_flight``)."""
    __tracebackhide__ = True
    x, y = make_batch(sizes, batch, seed)

    def body(c: Any) -> tuple[float | None, dict[str, np.ndarray], int]:
        pipe = Pipeline(MLP(list(sizes), dtype=np.float64, rng=seed), c, micro_batches,
                        schedule=schedule)
        loss = pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
        grads = {n: p.grad for n, p in pipe.named_parameters()}
        return loss, grads, pipe.last_run.peak_in_flight

    results, _ = run_ranks(body, len(schedule), what, ())
    expect_one_process(what, results[-1][0], {n: g for r in results for n, g in r[1].items()},
                       one_process(sizes, x, y, seed), "")
    return [r[2] for r in results]


def expect_bubble(what: str, schedule: list[list[Step]], micro_batches: int, hint: str) -> None:
    """Each stage idles (K-1)/(M+K-1) of the step on the unit clock (F 1, B 2)."""
    __tracebackhide__ = True
    stages = len(schedule)
    formula = bubble_formula(stages, micro_batches)
    for k, idle in enumerate(bubbles(simulate(schedule))):
        expect(np.isclose(idle, formula, atol=1e-9), f"{what}: on a clock where a forward "
               f"takes 1 and a backward 2, stage {k} idles {idle:.3f} of the step; the bubble "
               f"is (K-1)/(M+K-1) = {formula:.3f}{hint}. Your schedule:\n"
               f"{format_schedule(schedule)}")


def check_gpipe(gpipe: Callable[[int, int], Any], stages: int, micro_batches: int,
                batch: int = 10, sizes: tuple[int, ...] = SIZES, seed: int = 0,
                block: tuple[str, ...] = LIBRARY_GPIPE) -> None:
    """``gpipe(K, M)``: valid, all forwards before any backward, the formula's bubble,
    the backwards last in, first out, and one process's gradients through the engine."""
    __tracebackhide__ = True
    what = f"gpipe({stages}, {micro_batches})"
    schedule = answer_schedule(gpipe, stages, micro_batches, block)
    for k, steps in enumerate(schedule):
        expect("".join(s.phase for s in steps) == "F" * micro_batches + "B" * micro_batches,
               f"{what}: rank {k} runs {' '.join(map(str, steps))}; GPipe runs all "
               f"{micro_batches} forwards, then all {micro_batches} backwards")
    expect_bubble(what, schedule, micro_batches, ": every stage takes the micro-batches in "
                  "the order they come (F0, F1, ...), and the backwards in one order too")
    for k, steps in enumerate(schedule):
        forwards = [s.micro for s in steps if s.phase == "F"]
        backwards = [s.micro for s in steps if s.phase == "B"]
        expect(backwards == forwards[::-1], f"{what}: rank {k} runs its backwards "
               f"{' '.join(f'B{m}' for m in backwards)} after the forwards "
               f"{' '.join(f'F{m}' for m in forwards)}; GPipe's backwards go last in, first "
               f"out, {' '.join(f'B{m}' for m in forwards[::-1])}: the micro-batch whose "
               "forward ran last is the first whose gradient comes back")
    pipeline_run(schedule, micro_batches, batch, sizes, seed, f"{what} run by Pipeline")


def check_1f1b(one_f_one_b: Callable[[int, int], Any], stages: int, micro_batches: int,
               batch: int = 10, sizes: tuple[int, ...] = SIZES, seed: int = 0,
               block: tuple[str, ...] = LIBRARY_1F1B) -> None:
    """``one_f_one_b(K, M)``: valid, one process's gradients through the engine, at most
    K - k micro-batches in flight on stage k, and the formula's bubble."""
    __tracebackhide__ = True
    what = f"one_f_one_b({stages}, {micro_batches})"
    schedule = answer_schedule(one_f_one_b, stages, micro_batches, block)
    peaks = pipeline_run(schedule, micro_batches, batch, sizes, seed, f"{what} run by Pipeline")
    for k, peak in enumerate(peaks):
        bound = min(stages - k, micro_batches)
        expect(peak <= bound, f"{what}: stage {k} held the activations of {peak} micro-batches "
               f"at once (between their F and their B; Pipeline counts them); 1F1B holds at "
               f"most K - k = {bound} there: after its K-1-k warm-up forwards a stage runs one "
               f"backward for every forward. Your schedule:\n{format_schedule(schedule)}")
    expect_bubble(what, schedule, micro_batches, ", as GPipe's: after the warm-up no stage "
                  "waits while another works (naive's order idles (K-1)/K)")
