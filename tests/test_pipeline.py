"""Pipeline parallelism: every schedule against one process on the same seeded data (float64)."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist.autograd.memory import saved_bytes
from minidist.comm import LocalCluster
from minidist.nn import MLP, Linear, ReLU, Sequential
from minidist.nn import functional as F
from minidist.parallel.pipeline import (
    Pipeline,
    ScheduleError,
    Step,
    bubble_formula,
    bubbles,
    check_schedule,
    format_schedule,
    gpipe,
    make_schedule,
    naive,
    one_f_one_b,
    simulate,
    split_stages,
)

SIZES = [6, 8, 8, 8, 8, 8, 8, 8, 3]  # 8 Linear layers, 15 modules with the ReLUs
BATCH = 11                           # divisible by none of the M tested


def deep_model() -> MLP:
    return MLP(SIZES, dtype=np.float64, rng=0)


def batch(seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, SIZES[0])), rng.integers(0, SIZES[-1], BATCH)


def single_process(steps: int = 1, lr: float = 0.0):
    """Loss and gradients of the first step, and the parameters after ``steps`` SGD steps."""
    model = deep_model()
    opt = md.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = batch(step + 1)
        opt.zero_grad()
        loss = F.cross_entropy(model(md.Tensor(x)), y)
        loss.backward()
        if step == 0:
            first = (loss.item(), {n: p.grad.copy() for n, p in model.named_parameters()})
        opt.step()
    return (*first, {n: p.data.copy() for n, p in model.named_parameters()})


def pipeline_rank(c, schedule, micro_batches, steps=1, lr=0.0, rematerialise=False):
    pipe = Pipeline(deep_model(), c, micro_batches, schedule=schedule,
                    rematerialise=rematerialise)
    opt = md.optim.SGD(pipe.parameters(), lr=lr)
    for step in range(steps):
        x, y = batch(step + 1)
        opt.zero_grad()
        with saved_bytes() as saved:
            loss = pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
        if step == 0:
            first = (loss, {n: p.grad.copy() for n, p in pipe.named_parameters()},
                     pipe.last_run.peak_in_flight)
        opt.step()
    return (*first, {n: p.data.copy() for n, p in pipe.named_parameters()}, saved.peak)


def assert_matches_one_process(results, expected_loss, expected_grads):
    assert results[-1][0] == pytest.approx(expected_loss, rel=1e-12, abs=1e-12)
    assert all(r[0] is None for r in results[:-1])
    grads = {name: g for r in results for name, g in r[1].items()}
    assert sorted(grads) == sorted(expected_grads)  # every parameter once, the model's names
    for name, expected in expected_grads.items():
        np.testing.assert_allclose(grads[name], expected, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("rematerialise", [False, True])
def test_a_first_stage_without_parameters_trains_as_one_process(schedule, rematerialise):
    """Rank 0 holds a ReLU alone: its backward has nothing to do, but takes rank 1's
    gradients (once "backward() on a tensor that does not require grad" on rank 0)."""
    def model():
        return Sequential(ReLU(), Linear(SIZES[0], SIZES[-1], dtype=np.float64, rng=0))

    x, y = batch()
    one = model()
    loss = F.cross_entropy(one(md.Tensor(x)), y)
    loss.backward()

    def rank(c):
        pipe = Pipeline(model(), c, 3, schedule=schedule, rematerialise=rematerialise)
        step = pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
        return step, {n: p.grad.copy() for n, p in pipe.named_parameters()}

    assert_matches_one_process(md.launch(rank, 2, backend="local", timeout=30), loss.item(),
                               {n: p.grad for n, p in one.named_parameters()})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("schedule", ["naive", "gpipe", "1f1b"])
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_every_schedule_equals_one_process(schedule, stages):
    loss, grads, _ = single_process()
    for micro_batches in (1, 2, 4, 8):
        results = md.launch(pipeline_rank, stages, args=(schedule, micro_batches),
                            backend="local", timeout=60)
        assert_matches_one_process(results, loss, grads)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stages", [2, 4])
def test_activations_in_flight_gpipe_holds_m_1f1b_at_most_k(stages):
    micro_batches = 8
    for schedule, expected in (("gpipe", [micro_batches] * stages),
                               ("1f1b", [stages - k for k in range(stages)]),
                               ("naive", [1] * stages)):
        results = md.launch(pipeline_rank, stages, args=(schedule, micro_batches),
                            backend="local", timeout=30)
        assert [r[2] for r in results] == expected, schedule


@pytest.mark.timeout(60)
def test_rematerialisation_gives_the_same_gradients_from_fewer_saved_bytes():
    loss, grads, _ = single_process()
    for schedule in ("gpipe", "1f1b"):
        kept = md.launch(pipeline_rank, 3, args=(schedule, 4), backend="local", timeout=30)
        results = md.launch(pipeline_rank, 3, args=(schedule, 4, 1, 0.0, True),
                            backend="local", timeout=30)
        assert_matches_one_process(results, loss, grads)
        assert all(r[4] < k[4] for r, k in zip(results, kept, strict=True))


@pytest.mark.timeout(60)
def test_training_steps_match_one_process():
    *_, expected = single_process(steps=3, lr=0.1)
    results = md.launch(pipeline_rank, 3, args=("1f1b", 4, 3, 0.1), backend="local", timeout=30)
    params = {name: p for r in results for name, p in r[3].items()}
    for name, value in expected.items():
        np.testing.assert_allclose(params[name], value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_predict_gives_the_model_output_on_the_last_rank():
    x, _ = batch()
    expected = deep_model()(md.Tensor(x)).data

    def rank(c):
        pipe = Pipeline(deep_model(), c, micro_batches=3)
        return pipe.predict(x if c.rank == 0 else None)

    results = md.launch(rank, 3, backend="local", timeout=30)
    assert results[0] is None and results[1] is None
    np.testing.assert_allclose(results[2], expected, rtol=1e-12)


# ---- schedules as data ----

def test_schedules_print_as_the_lecture_draws_them():
    assert format_schedule(gpipe(2, 3)) == ("rank 0: F0 F1 F2 B2 B1 B0\n"
                                            "rank 1: F0 F1 F2 B2 B1 B0")
    assert format_schedule(one_f_one_b(3, 4)).splitlines() == [
        "rank 0: F0 F1 F2 B0 F3 B1 B2 B3",
        "rank 1: F0 F1 B0 F2 B1 F3 B2 B3",
        "rank 2: F0 B0 F1 B1 F2 B2 F3 B3"]
    assert format_schedule(naive(2, 2)) == "rank 0: F0 B0 F1 B1\nrank 1: F0 B0 F1 B1"
    assert format_schedule(one_f_one_b(4, 2)).splitlines()[0] == "rank 0: F0 F1 B0 B1"


@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("micro_batches", [1, 4, 8, 16])
def test_simulated_bubble_is_the_formula(stages, micro_batches):
    expected = bubble_formula(stages, micro_batches)
    for name in ("gpipe", "1f1b"):
        assert bubbles(simulate(make_schedule(name, stages, micro_batches))) == \
            pytest.approx([expected] * stages)
    assert bubbles(simulate(naive(stages, micro_batches))) == \
        pytest.approx([(stages - 1) / stages] * stages)


def test_malformed_schedules_are_named():
    good = gpipe(2, 2)
    with pytest.raises(ScheduleError, match=r"rank 1 must run .* missing \[B0\]"):
        check_schedule([good[0], good[1][:-1]], 2)
    with pytest.raises(ScheduleError, match="rank 0 runs B1 before F1"):
        check_schedule([[Step(0, 0, "F"), Step(0, 1, "B"), Step(0, 1, "F"), Step(0, 0, "B")],
                        good[1]], 2)
    with pytest.raises(ScheduleError, match="rank 1 holds stage 1"):
        check_schedule([good[0], good[0]], 2)
    with pytest.raises(ScheduleError, match="micro-batch 5"):
        check_schedule([good[0] + [Step(0, 5, "F")], good[1]], 2)
    with pytest.raises(ValueError, match="schedule must be one of"):
        make_schedule("zigzag", 2, 2)


def test_a_deadlocking_schedule_names_the_ranks_and_what_they_wait_for():
    # rank 1 wants micro-batch 1 first; rank 0 sends it only after B0, which needs rank 1
    schedule = [[Step(0, 0, "F"), Step(0, 0, "B"), Step(0, 1, "F"), Step(0, 1, "B")],
                [Step(1, 1, "F"), Step(1, 1, "B"), Step(1, 0, "F"), Step(1, 0, "B")]]
    message = (r"deadlock: rank 0 waits at B0 for the gradient of micro-batch 0 from rank 1; "
               r"rank 1 waits at F1 for the activation of micro-batch 1 from rank 0")
    with pytest.raises(ScheduleError, match=message):
        check_schedule(schedule, 2)

    def rank(c):
        Pipeline(deep_model(), c, micro_batches=2, schedule=schedule)

    with pytest.raises(Exception, match="deadlock: rank 0 waits"):
        md.launch(rank, 2, backend="local", timeout=30)


def test_any_order_of_micro_batches_matches_by_tag():
    """Stage 1 takes the micro-batches in another order than stage 0 sends them."""
    loss, grads, _ = single_process()
    schedule = [[Step(0, m, "F") for m in range(3)] + [Step(0, m, "B") for m in range(3)],
                [Step(1, m, p) for m in (2, 0, 1) for p in "FB"]]
    results = md.launch(pipeline_rank, 2, args=(schedule, 3), backend="local", timeout=30)
    assert_matches_one_process(results, loss, grads)


# ---- stages ----

def test_split_keeps_the_models_layers_and_names():
    model = deep_model()
    parts = split_stages(model, 4)
    assert [m for part in parts for m in part] == list(model)
    names = [n for part in parts for n, _ in part.named_parameters()]
    assert names == [n for n, _ in model.named_parameters()]
    counts = [sum(p.data.size for p in part.parameters()) for part in parts]
    assert max(counts) <= 2 * min(counts)  # about balanced by parameters
    assert [len(part) for part in split_stages(model, 3, balance=[5, 5, 5])] == [5, 5, 5]


def test_bad_splits_and_batches_are_named():
    model = deep_model()
    with pytest.raises(ValueError, match="cannot cut 15 layers into 16 stages"):
        split_stages(model, 16)
    with pytest.raises(ValueError, match="balance must give 2 positive"):
        split_stages(model, 2, balance=[15, 0])
    with pytest.raises(TypeError, match="needs a Sequential"):
        split_stages(md.nn.Linear(2, 2), 1)

    def too_small(c):
        Pipeline(deep_model(), c, micro_batches=20).train_step(*batch())

    with pytest.raises(Exception, match="11 rows cannot be cut into 20 micro-batches"):
        md.launch(too_small, 1, backend="local", timeout=30)


@pytest.mark.parametrize("case, message", [
    ("micro_batches", "rank 2 was given micro_batches=4, rank 1 3: every rank must pass the same"),
    ("y", "y has 10 rows on rank 2, but x has 11 on rank 0: they must be the same mini-batch"),
])
def test_ranks_that_disagree_on_the_mini_batch_are_told_so(case, message):
    """Once a deep "message is 224 bytes, buffer is 448" or a loss of 4 rows of logits
    against 3 targets, on one rank."""
    def step(c):
        m = 3 + (case == "micro_batches" and c.rank == 2)
        x, y = batch()
        pipe = Pipeline(deep_model(), c, micro_batches=m)
        y = y[:10] if case == "y" else y
        pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)

    with pytest.raises(md.comm.RankError, match=message):
        md.launch(step, 3, backend="local", timeout=30)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("micro_batches", [1, 4, 8, 16])
def test_bubble_on_the_modelled_clock_is_the_formula(stages, micro_batches):
    """Every stage declares the same work per row (forward 1 ms, backward 2 ms per 16 rows)."""

    def work(step, rows):
        return rows / 16 * (1e-3 if step.phase == "F" else 2e-3)

    def rank(c):
        pipe = Pipeline(MLP([16] * 9, dtype=np.float64, rng=0), c, micro_batches,
                        schedule="1f1b", work=work, clock=lambda: c.stats.clock)
        x = np.random.default_rng(0).normal(size=(16 * micro_batches, 16))
        pipe.train_step(x, np.zeros(len(x), dtype=np.int64))
        return pipe.last_run.trace

    traces = LocalCluster(stages).run(rank, timeout=30)
    span = max(end for trace in traces for _, _, end in trace)
    measured = [1 - sum(end - start for _, start, end in trace) / span for trace in traces]
    assert measured == pytest.approx([bubble_formula(stages, micro_batches)] * stages, abs=0.05)
