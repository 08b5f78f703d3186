"""Lab 7's checks, run on the library's reference code, one pytest marker per task.

``pytest -m lab07_1f1b`` runs the check that grades Task 3 against the library's
``one_f_one_b``, which is the solution's code (compared below, as are GPipe's
schedule and the bubble); Task 1's check runs the solution's own exchange (the
library's is the engine's, with a header and non-blocking sends beneath). Each
claim a check makes rejects a known-wrong answer in the sentence a student reads
(the notebooks in ``tests/fixtures/lab07/`` are some of them, each losing exactly its
task's points under real grading), a deadlock included, which must fail and never hang,
and an answer that calls the library's own is blocked.
"""

from __future__ import annotations

import ast
import time

import numpy as np
import pytest
from notebook_source import SOLUTIONS, answer_function, code

import minidist as md
from minidist.autograd.checkpoint import checkpoint_sequential
from minidist.labkit import BlockedError, CheckFailed, task
from minidist.labkit.lab07 import check_1f1b, check_exchange, check_gpipe
from minidist.labkit.lab07_costs import (
    check_bubble,
    check_checkpointing,
    library_timed_pipeline,
    timed_run,
)
from minidist.parallel.pipeline import Pipeline, StageEngine, Step, bubbles, gpipe, one_f_one_b
from minidist.util import chunk_bounds

SOLUTION = SOLUTIONS / "lab07_pipelines" / "lab07_pipelines.ipynb"


def solution(name: str):
    """The function ``name`` of the solution notebook, defined as the notebook does."""
    namespace = {"np": np, "md": md, "Step": Step, "Pipeline": Pipeline,
                 "chunk_bounds": chunk_bounds}
    tree = ast.Module([answer_function(SOLUTION, name)], type_ignores=[])
    exec(compile(tree, str(SOLUTION), "exec"), namespace)
    return namespace[name]


def without_argument_checks(library) -> str:
    """The library's function as source, its first statement (``_check_sizes``) left out."""
    tree = ast.parse(code(library)).body[0]
    first = tree.body[0]
    assert isinstance(first, ast.Expr) and first.value.func.id == "_check_sizes"
    tree.body = tree.body[1:]
    return ast.unparse(tree)


@pytest.mark.parametrize("name, library", [("gpipe", gpipe), ("one_f_one_b", one_f_one_b)])
def test_the_schedules_are_the_library_code(name, library):
    assert code(answer_function(SOLUTION, name)) == without_argument_checks(library)


def test_the_bubble_is_the_library_code():
    assert code(answer_function(SOLUTION, "bubbles")) == code(bubbles)
    reference = code(library_timed_pipeline).replace("library_timed_pipeline", "timed_pipeline")
    assert code(answer_function(SOLUTION, "timed_pipeline")) == reference


# --- Task 1 ----------------------------------------------------------------------------------
forward_step, backward_step = solution("forward_step"), solution("backward_step")


@pytest.mark.lab07_exchange
@pytest.mark.timeout(120)
def test_exchange():
    for stages, micro_batches, batch, order in [(2, 2, 10, "gpipe"), (3, 4, 10, "1f1b"),
                                                (3, 3, 10, "shuffled"), (1, 3, 10, "gpipe"),
                                                (4, 5, 11, "1f1b"), (4, 4, 13, "shuffled"),
                                                (2, 1, 10, "gpipe"), (1, 2, 10, "gpipe")]:
        check_exchange(forward_step, backward_step, stages, micro_batches, batch, order)


def backward_to_the_rank_before_the_last(c, micro, inp, out):
    """The last rank sends its input's gradient back as if it had a rank before it."""
    if c.rank == c.size - 1:
        out.backward()
        c.send(inp.grad, c.rank - 1, tag=2 * micro + 2)
    else:
        backward_step(c, micro, inp, out)


def test_exchange_names_a_rank_that_does_not_exist():
    with pytest.raises(CheckFailed, match=r"^1 stage, 2 micro-batches .*: backward_step of "
                       r"micro-batch 1 on rank 0 posted a send to rank -1 \(tag 4\), but rank 0 "
                       r"has no rank before it: .* \(with K = 1 it is the first and the last\)$"):
        check_exchange(forward_step, backward_to_the_rank_before_the_last, 1, 2)
    check_exchange(forward_step, backward_to_the_rank_before_the_last, 2, 2)  # K > 1: right


def forward_around_the_ring(c, stage, micro, x, shape):
    """Sends its output to (k + 1) % K: the last rank's goes to rank 0."""
    inp = md.Tensor(x) if c.rank == 0 else md.Tensor(
        c.recv(np.empty(shape), c.rank - 1, tag=2 * micro + 1), requires_grad=True)
    out = stage(inp)
    c.send(out.data, (c.rank + 1) % c.size, tag=2 * micro + 1)
    return inp, out


def backward_from_the_left(c, micro, inp, out):
    """Waits for the output's gradient from k-1: every rank waits, nobody sends."""
    if c.rank == c.size - 1:
        out.backward()
    else:
        grad = c.recv(np.empty(out.shape), c.rank - 1 if c.rank else 1, tag=2 * micro + 2)
        out.backward(grad)
    if c.rank > 0:
        c.send(inp.grad, c.rank - 1, tag=2 * micro + 2)


def forward_one_tag(c, stage, micro, x, shape):
    inp = md.Tensor(x) if c.rank == 0 else md.Tensor(
        c.recv(np.empty(shape), c.rank - 1, tag=1), requires_grad=True)
    out = stage(inp)
    if c.rank < c.size - 1:
        c.send(out.data, c.rank + 1, tag=1)
    return inp, out


def backward_one_tag(c, micro, inp, out):
    if c.rank == c.size - 1:
        out.backward()
    else:
        out.backward(c.recv(np.empty(out.shape), c.rank + 1, tag=2))
    if c.rank > 0:
        c.send(inp.grad, c.rank - 1, tag=2)


def backward_twice(c, micro, inp, out):
    """Sends the input's gradient, then sends it again."""
    backward_step(c, micro, inp, out)
    if c.rank > 0:
        c.send(inp.grad, c.rank - 1, tag=1000 + micro)


def forward_through_the_engine(c, stage, micro, x, shape):
    return StageEngine._forward(None, micro, None)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("forward, backward, order, message", [
    (forward_around_the_ring, backward_step, "gpipe",
     r"^3 stages, .*forward_step of micro-batch 0 on rank 2 posted \[recv from rank 1 \(tag 1\), "
     r"send to rank 0 \(tag 1\)\]; expected \[recv from rank 1 \(tag 1\)\].*not to another rank"),
    (forward_step, backward_from_the_left, "gpipe", r"^3 stages, .*deadlock"),
    (forward_one_tag, backward_one_tag, "shuffled",
     r"^3 stages, .* rank 1 raised ValueError: rank 1: recv from rank 0 tag 1: message is 32 x "
     r"float64, buffer is 24 x float64$"),
    (forward_step, backward_twice, "1f1b", r"backward_step of micro-batch 0 on rank 1 posted "
     r".*send to rank 0 \(tag 1000\)\]"),
])
def test_exchange_rejects(forward, backward, order, message):
    with pytest.raises(CheckFailed, match=message) as failure:
        check_exchange(forward, backward, 3, 3, order=order)
    assert "\n" not in str(failure.value)


def test_exchange_rejects_an_input_without_gradient_and_a_wrong_gradient():
    def backward_sends_the_activation(c, micro, inp, out):
        if c.rank == c.size - 1:
            out.backward()
        else:
            out.backward(c.recv(np.empty(out.shape), c.rank + 1, tag=2 * micro + 2))
        if c.rank > 0:
            c.send(inp.data, c.rank - 1, tag=2 * micro + 2)

    def forward_no_grad_input(c, stage, micro, x, shape):
        inp = md.Tensor(x) if c.rank == 0 else md.Tensor(
            c.recv(np.empty(shape), c.rank - 1, tag=2 * micro + 1))
        out = stage(inp)
        if c.rank < c.size - 1:
            c.send(out.data, c.rank + 1, tag=2 * micro + 1)
        return inp, out

    with pytest.raises(CheckFailed, match=r"rank 1 raised .*NoneType"):
        check_exchange(forward_no_grad_input, backward_step, 2, 2)
    with pytest.raises(CheckFailed, match=r"the gradient of 0.weight against one process"):
        check_exchange(forward_step, backward_sends_the_activation, 2, 2)


def test_exchange_counts_the_bytes_each_rank_sent():
    def forward_sends_twice(c, stage, micro, x, shape):  # again in float32, around the log
        inp, out = forward_step(c, stage, micro, x, shape)
        if c.rank < c.size - 1:
            c._c.send(out.data.astype(np.float32), c.rank + 1, tag=999)
        return inp, out

    with pytest.raises(CheckFailed, match=r"rank 0 sent \d+ bytes; one float64 activation"):
        check_exchange(forward_sends_twice, backward_step, 2, 2)


def test_exchange_blocks_the_engine():
    with pytest.raises(BlockedError, match="write your own StageEngine._forward"):
        check_exchange(forward_through_the_engine, backward_step, 2, 2)


# --- Task 2 ----------------------------------------------------------------------------------
@pytest.mark.lab07_gpipe
@pytest.mark.timeout(60)
def test_gpipe():
    for stages, micro_batches, batch in [(2, 4, 10), (3, 2, 10), (1, 2, 10), (4, 8, 16),
                                         (1, 3, 10), (3, 5, 11)]:
        check_gpipe(gpipe, stages, micro_batches, batch, block=())


def naive_order(stages, micro_batches):
    return [[Step(k, m, p) for m in range(micro_batches) for p in "FB"] for k in range(stages)]


def rank_one_reversed(stages, micro_batches):
    """GPipe, but rank 1 takes its forwards last first: it waits for rank 0's last one."""
    schedule = gpipe(stages, micro_batches)
    schedule[1][:micro_batches] = schedule[1][:micro_batches][::-1]
    return schedule


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, message", [
    (naive_order, r"^gpipe\(3, 4\): rank 0 runs F0 B0 F1 B1 .*all 4 forwards, then all 4 "),
    (rank_one_reversed, r"^gpipe\(3, 4\): .* stage 0 idles 0\.\d+ .* = 0\.333: every stage takes"),
    (lambda k, m: [steps[:-1] for steps in gpipe(k, m)],
     r"^<lambda>\(3, 4\) cannot run: rank 0 must run F and B .* missing \[B0\]"),
    (lambda k, m: gpipe(k, m)[:-1], r"returned list; a schedule is a list of K = 3 lists"),
    (lambda k, m: [[s for s in steps if s.phase == "F"] + [s for s in steps if s.phase == "B"][::-1]
                   for steps in gpipe(k, m)],
     r"^gpipe\(3, 4\): rank 0 runs its backwards B0 B1 B2 B3 after the forwards F0 F1 F2 F3; "
     r"GPipe's backwards go last in, first out, B3 B2 B1 B0"),
])
def test_gpipe_rejects(answer, message):
    with pytest.raises(CheckFailed, match=message):
        check_gpipe(answer, 3, 4, block=())


def test_gpipe_blocks_the_library():
    with pytest.raises(BlockedError, match="write your own gpipe"):
        check_gpipe(lambda k, m: gpipe(k, m), 2, 2)


# --- Task 3 ----------------------------------------------------------------------------------
@pytest.mark.lab07_1f1b
@pytest.mark.timeout(60)
def test_1f1b():
    for stages, micro_batches, batch in [(2, 4, 10), (3, 4, 10), (3, 1, 10), (1, 3, 10),
                                         (4, 8, 16), (4, 2, 10), (3, 7, 9), (1, 2, 10)]:
        check_1f1b(one_f_one_b, stages, micro_batches, batch, block=())


def warmup(count):
    """1F1B with rank k's warm-up given by ``count(K, k)``."""
    def schedule(stages, micro_batches):
        out = []
        for k in range(stages):
            w = min(count(stages, k), micro_batches)
            steps = [Step(k, m, "F") for m in range(w)]
            for m in range(micro_batches - w):
                steps += [Step(k, w + m, "F"), Step(k, m, "B")]
            out.append(steps + [Step(k, m, "B") for m in range(micro_batches - w, micro_batches)])
        return out
    return schedule


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, message", [
    (warmup(lambda stages, k: k), r"^schedule\(3, 4\) cannot run: deadlock: rank 0 waits at B0 "
     r"for the gradient of micro-batch 0 from rank 1; rank 1 waits at F1 for the activation of "
     r"micro-batch 1 from rank 0; rank 2 waits at F1"),
    (lambda k, m: gpipe(k, m), r"stage 0 held the activations of 4 micro-batches at once.* at "
     r"most K - k = 3.*\nrank 0: F0 F1 F2 F3 B3"),
    (warmup(lambda stages, k: stages - k), r"stage 0 held .* 4 micro-batches .* at most K - k = 3"),
    (naive_order, r"stage 0 idles 0\.\d+ .* \(K-1\)/\(M\+K-1\) = 0\.333, as GPipe's"),
])
def test_1f1b_rejects(answer, message):
    with pytest.raises(CheckFailed, match=message):
        check_1f1b(answer, 3, 4, block=())


@pytest.mark.timeout(60)
def test_a_deadlocking_schedule_fails_at_once_and_never_runs():
    start = time.perf_counter()
    with pytest.raises(CheckFailed, match=r"deadlock: rank 0 waits .*; rank 1 waits .*rank 0"):
        check_1f1b(warmup(lambda stages, k: k), 4, 8, block=())
    assert time.perf_counter() - start < 10  # refused by check_schedule: no rank ever started


def test_1f1b_blocks_the_library():
    with pytest.raises(BlockedError, match="write your own one_f_one_b"):
        check_1f1b(lambda k, m: one_f_one_b(k, m), 2, 2)


# --- Task 4 ----------------------------------------------------------------------------------
@pytest.mark.lab07_bubble
@pytest.mark.timeout(60)
def test_bubble():
    for stages, micro_batches, schedule, f, b in [(2, 4, "1f1b", 1e-3, 2e-3),
                                                  (3, 6, "gpipe", 1e-3, 2e-3),
                                                  (4, 8, "1f1b", 1e-3, 2e-3),
                                                  (2, 1, "gpipe", 1e-3, 2e-3),
                                                  (3, 4, "naive", 2e-3, 3e-3),
                                                  (3, 1, "gpipe", 1e-3, 2e-3),
                                                  (2, 3, "naive", 3e-3, 1e-3)]:
        check_bubble(library_timed_pipeline, bubbles, stages, micro_batches, schedule, f, b,
                     block=())


def timed_on_the_wall_clock(c, model, x, y, schedule, micro_batches, forward_s, backward_s):
    pipe = Pipeline(model, c, micro_batches, schedule=schedule,
                    work=lambda step, rows: forward_s if step.phase == "F" else backward_s)
    pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
    return pipe.last_run.trace


def timed_without_work(c, model, x, y, schedule, micro_batches, forward_s, backward_s):
    pipe = Pipeline(model, c, micro_batches, schedule=schedule, clock=lambda: c.stats.clock)
    pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
    return pipe.last_run.trace


def own_span(timed):
    return [1 - sum(e - s for _, s, e in steps) / (steps[-1][2] - steps[0][1]) for steps in timed]


def busy_share(timed):
    span = max(e for steps in timed for _, _, e in steps)
    return [sum(e - s for _, s, e in steps) / span for steps in timed]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("timed, measure, message", [
    (timed_on_the_wall_clock, bubbles, r"rank 0's F0 ran from .* ms, expected 0 to 1 ms on the "
     r"modelled clock: declare forward_s"),
    (timed_without_work, bubbles, r"rank 0's F0 ran from 0 to 0 ms, expected 0 to 1 ms"),
    (library_timed_pipeline, own_span, r"bubbles on the traces of that run returned .*each "
     r"row's idle share of the span"),
    (library_timed_pipeline, busy_share, r"bubbles on the traces of that run returned"),
])
def test_bubble_rejects(timed, measure, message):
    with pytest.raises(CheckFailed, match=message):
        check_bubble(timed, measure, 3, 4, block=())


def test_bubble_with_rank_0s_end_as_the_span_fails_on_the_hand_made_traces():
    def rank_0s_end(timed):  # right in a pipeline's step, where rank 0 ends last
        span = timed[0][-1][2]
        return [1 - sum(e - s for _, s, e in steps) / span for steps in timed]

    with pytest.raises(CheckFailed, match=r"bubbles on these traces \[\[\('F0'"):
        check_bubble(library_timed_pipeline, rank_0s_end, 2, 4, block=())


def test_bubble_holds_the_trace_to_the_work_done_on_the_ranks():
    """The library's trace, exact, returned without training on the rank's communicator."""
    traces = [trace for trace, _ in timed_run(library_timed_pipeline, 3, 4, "1f1b", 1e-3, 2e-3,
                                              "the library")]

    def returns_the_trace(c, model, x, y, schedule, micro_batches, forward_s, backward_s):
        return traces[c.rank]

    with pytest.raises(CheckFailed, match=r"rank 0's trace has 8 steps, but its communicator "
                                          r"did the declared work of 0"):
        check_bubble(returns_the_trace, bubbles, 3, 4, block=())


def test_bubble_blocks_the_library_the_gantt_chart_uses_too():
    with pytest.raises(BlockedError, match="write your own bubbles"):
        check_bubble(library_timed_pipeline, lambda timed: bubbles(timed), 2, 2)


# --- Task 5 ----------------------------------------------------------------------------------
@pytest.mark.lab07_checkpoint
def test_checkpoint():
    for layers, segments, width, batch in [(4, 2, 8, 16), (8, 3, 8, 16), (4, 1, 8, 16),
                                           (3, 5, 8, 16), (16, 4, 8, 16), (5, 9, 6, 16),
                                           (3, 1, 8, 16), (6, 5, 8, 7)]:
        check_checkpointing(checkpoint_sequential, layers, segments, width, batch, block=())
    check_checkpointing(solution("checkpoint_segments"), 8, 3)


def run_all(modules, x):
    for module in modules:
        x = module(x)
    return x


def keeps_everything(modules, segments, x):
    return run_all(modules, x)


def cuts_the_graph(modules, segments, x):
    """Each segment but the last under no_grad, its output a new leaf: nothing to recompute."""
    bounds = chunk_bounds(len(modules), segments)
    for number, (start, stop) in enumerate(bounds):
        if number == len(bounds) - 1:
            return run_all(modules[start:stop], x)
        with md.no_grad():
            x = md.Tensor(run_all(modules[start:stop], x).data, requires_grad=True)


def every_module(modules, segments, x):
    for module in modules:
        x = md.checkpoint(module, x)
    return x


def late_binding(modules, segments, x):
    """A bare lambda in the loop: every segment recomputes the last part in backward."""
    bounds = chunk_bounds(len(modules), segments)
    for number, (start, stop) in enumerate(bounds):
        part = modules[start:stop]
        x = run_all(part, x) if number == len(bounds) - 1 else md.checkpoint(
            lambda h: run_all(part, h), x)  # noqa: B023 (the known-wrong answer)
    return x


def checkpoints_the_last_run_too(modules, segments, x):
    for start, stop in chunk_bounds(len(modules), segments):
        x = md.checkpoint(lambda h, part=modules[start:stop]: run_all(part, h), x)
    return x


def the_last_runs_longer(modules, segments, x):
    """The runs cut i·n/k .. (i+1)·n/k: the last ones are the longer."""
    n = len(modules)
    bounds = [(i * n // segments, (i + 1) * n // segments) for i in range(segments)]
    for number, (start, stop) in enumerate(bounds):
        x = run_all(modules[start:stop], x) if number == len(bounds) - 1 else md.checkpoint(
            lambda h, part=modules[start:stop]: run_all(part, h), x)
    return x


@pytest.mark.parametrize("answer, message", [
    (keeps_everything, r"the step ran the forwards of modules 0\.\.14 once; checkpointing each "
     r"run but the last runs those of modules 0\.\.9 twice, 10\.\.14 once: no module ran "
     r"twice"),
    (checkpoints_the_last_run_too, r"forwards of modules 0\.\.14 twice; .*: the last run ran "
     r"forward twice too: it runs plainly, once"),

    (cuts_the_graph, r"parameter 0.weight has no gradient: backward never reached it: pass each "
     r"segment but the last through md.checkpoint"),
    (every_module, r"forwards of modules 0\.\.14 twice; .*the last run ran forward twice too"),
    (late_binding, r"^T5: your code raised RuntimeError: checkpoint: fn computed something else "
     r"when it ran again in backward"),
])
def test_checkpoint_rejects(answer, message):
    with pytest.raises(CheckFailed, match=message), task("T5"):
        check_checkpointing(answer, 8, 3)


def test_checkpoint_names_the_cut_that_makes_the_last_run_longer():
    with pytest.raises(CheckFailed, match=r"forwards of modules 0\.\.2 twice, 3\.\.6 once; .*: the "
                       r"last run here is modules 3\.\.6, where chunk_bounds\(7, 2\) makes it "
                       r"modules 4\.\.6: cut the runs with chunk_bounds"):
        check_checkpointing(the_last_runs_longer, 4, 2)
    check_checkpointing(the_last_runs_longer, 8, 3)  # 15 modules in 3: the same cut


def test_checkpoint_blocks_the_library():
    with pytest.raises(BlockedError, match="write your own checkpoint_sequential"):
        check_checkpointing(checkpoint_sequential, 4, 2)
