"""The parameter server's arguments: a bad option, learning rate or request is a clear
error on every rank (or on the worker that made it, ending the run), and ranks that build
it with other settings all fail, the rank at fault naming its own mistake."""

from __future__ import annotations

import numpy as np
import pytest
from test_ps import INITIAL, LAYOUT

from minidist.comm import LocalCluster, RankError, world
from minidist.parallel.ps import ParameterServer, ServerOptimizer


@pytest.mark.parametrize("options, message", [
    (dict(servers=3), "3 servers leave no worker"),
    (dict(servers=0), "servers >= 1"),
    (dict(consistency="ssp", staleness=-1), "staleness bound must be an integer >= 0"),
    (dict(consistency="ssp"), "needs a staleness bound"),
    (dict(consistency="eventual"), "must be 'bsp', 'asp' or 'ssp'"),
    (dict(softsync=3), "softsync n must be an integer in 1..2"),
    (dict(resume=True), "needs the checkpoint directory"),
    (dict(consistency="asp", staleness=2), "ASP has no staleness bound to set, got 2"),
])
def test_bad_options_fail_on_every_rank(options, message):
    def body(c):
        with pytest.raises(ValueError, match=message):
            ParameterServer(c, LAYOUT, **options)
        return True

    assert LocalCluster(3).run(body) == [True] * 3


@pytest.mark.parametrize("lr, eps", [(-1.0, 1e-8), (float("nan"), 1e-8), (float("inf"), 1e-8),
                                     (0.1, float("nan")), ("0.1", 1e-8)])
def test_a_learning_rate_or_eps_that_is_no_finite_number_is_refused(lr, eps):
    """NaN and inf were accepted, and every weight became NaN."""
    with pytest.raises(ValueError, match=r"server optimiser's (lr|eps) must be a finite number"):
        ServerOptimizer("sgd", lr, eps=eps)


@pytest.mark.parametrize("options, field, here", [
    (dict(servers=2), "servers", None),
    (dict(servers=0), "servers", "servers >= 1, got 0"),
    (dict(consistency="ssp", staleness=1), "consistency", None),
    (dict(consistency="ssp", staleness=-1), "consistency", "must be an integer >= 0, got -1"),
    (dict(softsync=1), "softsync", None),
    (dict(optimizer=ServerOptimizer("adam", 0.01)), "optimizer", None),
    (dict(dtype=np.float32), "dtype", None),
    (dict(dtype="float6"), "dtype", "data type 'float6' not understood"),
])
def test_options_that_differ_on_one_rank_fail_on_every_rank(options, field, here):
    """Rank 0 served as if all went well while the others deadlocked (in-process), or the
    job hung or ended with status 0 (MPI): a server and its workers disagreed on the job."""
    def body(c):
        with pytest.raises(ValueError) as raised:
            ParameterServer(c, LAYOUT, **(options if c.rank == 2 else {}))
        return str(raised.value)

    errors = LocalCluster(4).run(body)
    assert all(f"rank(s) [2] differ from rank 0 in {field}" in e for e in errors)
    assert (here is None or here in errors[2]) and "here:" not in errors[0] + errors[1]


def test_two_spellings_of_one_choice_agree():
    def body(c):
        spelled = dict(dtype="float64", optimizer=ServerOptimizer(), deterministic=True) \
            if c.rank == 2 else {}  # in-process, deterministic's default is True
        return ParameterServer(c, LAYOUT, **spelled).dtype

    assert LocalCluster(4).run(body) == [np.dtype(np.float64)] * 4


@pytest.mark.parametrize("rule", ["adam", "adagrad"])
def test_staleness_aware_steps_are_sgds_only(rule):
    """With Adam or AdaGrad a gradient scaled by 1/τ made the same step (m/√v undoes it):
    the flag did nothing it said."""
    with pytest.raises(ValueError, match=f"are SGD's: {rule}'s normalised step would cancel"):
        ServerOptimizer(rule, 0.01, staleness_aware=True)


def test_train_mlp_wants_a_checkpoint_folder_and_how_often_together(tmp_path):
    """It accepted checkpoint= and wrote nothing; resume=True then found no file."""
    from minidist.parallel.ps.training import train_mlp

    for options in (dict(checkpoint=tmp_path), dict(checkpoint_every=5)):
        with pytest.raises(ValueError, match="checkpoint= .a folder. and checkpoint_every= "):
            train_mlp(world(), **options)


@pytest.mark.parametrize("request_, message", [
    (lambda w: w.pull(np.array([0, LAYOUT.num_keys])), "outside every server's range"),
    (lambda w: w.push(LAYOUT.all_keys(), np.zeros(4)), "needs 18 gradient values"),
])
def test_a_bad_request_fails_its_worker_and_ends_the_run(request_, message):
    def body(c):
        ps = ParameterServer(c, LAYOUT)
        if ps.is_server:
            return ps.serve(INITIAL)
        request_(ps.worker())

    with pytest.raises(RankError, match=message):
        LocalCluster(2).run(body, timeout=30)
