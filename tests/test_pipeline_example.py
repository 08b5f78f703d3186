"""The pipeline example trains the course's MLP to one process's accuracy (in-process ranks,
and under a real mpiexec), and its Gantt chart draws every step of every rank."""

from __future__ import annotations

import numpy as np
import pytest
from mpi_example import run_under_mpiexec

from minidist.comm import LocalCluster
from minidist.examples import mlp
from minidist.examples import pipeline as example
from minidist.nn import MLP
from minidist.parallel.pipeline import Pipeline, bubble_formula, bubbles
from minidist.viz import plot_gantt

QUICK = ["--epochs", "2", "--hidden", "32", "--micro-batches", "4"]


@pytest.mark.timeout(120)
def test_two_stages_reach_the_single_process_accuracy(tmp_path, capsys):
    gantt = tmp_path / "gantt.png"
    two = example.main(["--ranks", "2", "--schedule", "gpipe", "--gantt", str(gantt)])
    one = mlp.train(seed=0, progress=False)  # the same model, data and optimiser
    assert two["accuracy"] >= 0.97
    assert two["accuracy"] == pytest.approx(one["accuracy"], abs=0.01)
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-3)
    out = capsys.readouterr().out
    assert "rank 0: F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0" in out
    assert "test accuracy" in out and "formula (K-1)/(M+K-1) = 11%" in out
    assert gantt.stat().st_size > 0
    assert [len(trace) for trace in two["traces"]] == [16, 16]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("options", [["--schedule", "1f1b"], ["--schedule", "naive"],
                                     ["--schedule", "1f1b", "--rematerialise"]])
def test_every_schedule_and_stage_count_trains_as_one_process(options):
    one = example.main([*QUICK, "--ranks", "1", *options])
    three = example.main([*QUICK, "--ranks", "3", *options])
    np.testing.assert_allclose(three["losses"], one["losses"], rtol=1e-5)
    assert three["accuracy"] == pytest.approx(one["accuracy"], abs=0.01)


@pytest.mark.parametrize("options, message", [
    (["--ranks", "4"], "4 ranks for 3 layers (--hidden 32): each stage needs a layer"),
    (["--micro-batches", "31"], "--micro-batches 31: must be in 1..30"),
    (["--epochs", "0"], "argument --epochs: wants an integer >= 1, got '0'"),
    (["--batch-size", "0"], "argument --batch-size: wants an integer >= 1, got '0'"),
])
def test_bad_input_is_a_clear_error_and_exit_status_2(options, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        example.main([*QUICK, *options])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_two_mpi_processes_train_and_draw_the_chart(tmp_path):
    gantt = tmp_path / "gantt.png"
    job = run_under_mpiexec(2, "minidist.examples.pipeline",
                            [*QUICK, "--schedule", "1f1b", "--gantt", str(gantt)])
    out, err = job.stdout, job.stderr
    assert job.returncode == 0, out + err
    assert "rank 1: F0 B0 F1 B1 F2 B2 F3 B3" in out
    assert "test accuracy" in out and gantt.stat().st_size > 0


def modelled_traces(schedule: str, stages: int, micro_batches: int) -> list:
    """Each rank's trace of one mini-batch on the modelled clock (backward twice forward)."""

    def work(step, rows):
        return rows * (1e-4 if step.phase == "F" else 2e-4)

    def rank(c):
        pipe = Pipeline(MLP([8] * 9, dtype=np.float64, rng=0), c, micro_batches,
                        schedule=schedule, work=work, clock=lambda: c.stats.clock)
        x = np.random.default_rng(0).normal(size=(4 * micro_batches, 8))
        pipe.train_step(x, np.zeros(len(x), dtype=np.int64))
        return pipe.last_run.trace

    return LocalCluster(stages).run(rank, timeout=30)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_gantt_chart_draws_2m_steps_per_rank_and_the_bubble(tmp_path, schedule):
    stages, micro_batches = 3, 4
    traces = modelled_traces(schedule, stages, micro_batches)
    path = tmp_path / "gantt.png"
    fig = plot_gantt(traces, path, title=schedule)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = fig.axes[0]
    # per rank: one grey band (the idle time) under one bar per step, F and B of each micro-batch
    assert len(ax.collections) == stages * (1 + 2 * micro_batches)
    numbers = sorted(text.get_text() for text in ax.texts)
    assert numbers == sorted([str(m) for m in range(micro_batches)] * (2 * stages))
    measured = bubbles(traces)
    assert measured == pytest.approx([bubble_formula(stages, micro_batches)] * stages, abs=0.01)
    labels = [label.get_text() for label in ax.get_yticklabels()]
    assert labels == [f"rank {k}\nbubble {b:.0%}" for k, b in enumerate(measured)]


def test_an_empty_trace_is_refused():
    with pytest.raises(ValueError, match="at least one step on every rank"):
        plot_gantt([[("F0", 0.0, 1.0)], []])
