"""The staleness simulator and the straggler race: repeatable to the bit, and what they show.

Everything runs on the in-process transport's modelled clock, so every
figure asserted here is exact and the same on any machine load (no wall-clock
assertion). Margins are those of the seeds fixed here (seed 0).
"""

import numpy as np
import pytest

from minidist.examples import ps_staleness
from minidist.parallel.ps.simulator import (
    METHODS,
    format_race,
    format_table,
    simulate,
    staleness_table,
    straggler_race,
)

SMALL = dict(global_batch=32, epochs=0.5)  # 22 clocks per learner


@pytest.fixture(scope="module")
def table():
    """Every rule at λ = 1 and 4, with the defaults (B = 128, 4 epochs, α0 = 2)."""
    trials = staleness_table(learners=(1, 4))
    return {(t.method, t.learners): t for t in trials}


@pytest.fixture(scope="module")
def races():
    return {compute: straggler_race(compute=compute) for compute in ("constant", "moving")}


def test_the_simulator_is_repeatable_to_the_bit():
    first, second = (simulate("staleness_aware", 4, **SMALL) for _ in range(2))
    assert np.array_equal(first.values, second.values)
    assert (first.accuracy, first.loss, first.staleness) == \
        (second.accuracy, second.loss, second.staleness)
    other_seed = simulate("staleness_aware", 4, seed=1, **SMALL)
    assert not np.array_equal(first.values, other_seed.values)


def test_with_one_learner_every_rule_is_the_same_sgd(table):
    reference = table["ssgd", 1].values
    for method in METHODS:
        assert np.array_equal(table[method, 1].values, reference), method
        assert table[method, 1].staleness == {1: 45}  # τ = 1: nothing missed


def test_every_rule_sees_the_same_samples(table):
    assert {t.samples for t in table.values()} == {45 * 128}


def test_asynchronous_sgd_at_alpha0_loses_and_the_staleness_aware_rules_do_not(table):
    ssgd, asgd = table["ssgd", 4].accuracy, table["asgd", 4].accuracy
    assert ssgd > 0.95  # measured 96.1%
    assert asgd < ssgd - 0.5  # measured 15.0%: diverged
    assert table["staleness_aware", 4].accuracy > asgd + 0.5  # measured 95.0%
    assert table["mean_staleness", 4].accuracy >= ssgd - 0.01  # measured 96.7%
    assert "*" in format_table(list(table.values())).splitlines()[2]  # asgd's row: diverged


def test_staleness_histograms_are_bounded_as_the_rules_say(table):
    gradients = 4 * 45
    assert table["ssgd", 4].staleness == {1: gradients}  # BSP, 1-softsync: never stale
    asynchronous = [table[m, 4].staleness for m in ("asgd", "staleness_aware", "mean_staleness")]
    for histogram in asynchronous:  # one schedule: the weights never change the timing
        assert histogram == asynchronous[0]
    histogram = asynchronous[0]
    assert sum(histogram.values()) == gradients and min(histogram) >= 1
    mean = sum(tau * n for tau, n in histogram.items()) / gradients
    assert abs(mean - 4) < 0.5  # c = 1: τ about λ, as the paper's n-softsync (measured 3.90)


def test_ssp_takes_under_0_72_of_bsps_time_when_the_straggler_moves(races):
    race = races["moving"]
    for target in race.targets:  # measured 0.63 .. 0.70 (0.70 at the loss 1, 10 clocks)
        assert race.ratio("ssp", target) <= 0.72
        assert race.ratio("asp", target) <= 0.72


def test_against_a_persistent_straggler_ssp_gains_only_a_head_start(races):
    race, moving = races["constant"], races["moving"]
    saved = [bsp - ssp for bsp, ssp in zip(race.times["bsp"], race.times["ssp"], strict=True)]
    assert max(saved) - min(saved) < 0.5e-3  # the same (4.1 ms) at every target
    assert max(saved) < (3 + 2) * 1e-3  # about s + 1 fast steps of 1 ms
    for target in race.targets:
        assert race.ratio("ssp", target) > moving.ratio("ssp", target)
        assert race.ratio("asp", target) < 0.7  # ASP does not wait: measured 0.55 .. 0.65
    assert "SSP(3)" in format_race(race)


@pytest.mark.parametrize("call, message", [
    (lambda: simulate("ssgd", 3, global_batch=32), "multiple of the 3 learners"),
    (lambda: simulate("sgd", 2), "method must be one of"),
    (lambda: simulate("ssgd", 0), "learners must be an integer >= 1"),
    (lambda: straggler_race(compute="slow"), "compute must be one of"),
])
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_example_prints_the_table_and_the_races_and_plots(tmp_path, capsys):
    path = tmp_path / "staleness.png"
    trials, races = ps_staleness.main(["--learners", "1,2", "--epochs", "0.5",
                                       "--global-batch", "32", "--workers", "2",
                                       "--targets", "1.5", "--plot", str(path)])
    out = capsys.readouterr().out
    assert len(trials) == 2 * len(METHODS) and len(races) == 3
    assert "asgd" in out and "SSP(3)" in out and "samples per run" in out
    assert path.stat().st_size > 0
