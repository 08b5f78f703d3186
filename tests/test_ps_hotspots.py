"""Hot spots: power-law ids make the servers of the popular key ranges the busiest;
replicating the hottest keys on the workers cuts their load and trains the same model."""

import numpy as np
import pytest

from minidist.comm import LocalCluster
from minidist.parallel.ps.hotspots import (
    assemble,
    choose_hot_keys,
    mf_layout,
    ratings,
    rmse,
    train_mf,
)

SERVERS, WORKERS, DIM = 4, 3, 8


@pytest.fixture(scope="module")
def data():
    return ratings(num_users=2000, num_items=2000, count=20_000, dim=DIM)


def run(data, hot, balance=False):
    cluster = LocalCluster(SERVERS + WORKERS)
    results = cluster.run(lambda c: train_mf(c, data, servers=SERVERS, hot=hot, steps=12,
                                             batch=128, dim=DIM, balance=balance), timeout=120)
    load = np.array([cluster.stats[s].bytes_recv + cluster.stats[s].bytes_sent
                     for s in range(SERVERS)])
    return assemble(results, mf_layout(data, DIM)), load, results


def test_replicating_hot_keys_and_balancing_ranges_cut_the_busiest_server_same_model(data):
    plain, plain_load, plain_results = run(data, hot=0)
    replicated, replicated_load, _ = run(data, hot=256)
    balanced, balanced_load, _ = run(data, hot=0, balance=True)
    both, both_load, _ = run(data, hot=256, balance=True)
    assert plain_load.max() > 1.5 * plain_load.mean()  # the popular ranges' servers
    assert replicated_load.max() < 0.75 * plain_load.max()
    assert balanced_load.max() < 1.2 * balanced_load.mean()
    assert both_load.max() < 0.5 * plain_load.max()
    for model in (replicated, balanced, both):
        np.testing.assert_allclose(model, plain, rtol=0, atol=1e-12)
    losses = plain_results[SERVERS].losses
    assert losses[-1] < losses[0]
    layout = mf_layout(data, DIM)
    untrained = np.random.default_rng(1).normal(0, 0.1, layout.num_values)  # train_mf's start
    assert rmse(data, layout, plain, DIM) < rmse(data, layout, untrained, DIM)


def test_hot_keys_are_the_most_requested_ties_to_the_smaller_key():
    accessed = np.array([5, 5, 5, 2, 2, 9, 9, 1])
    np.testing.assert_array_equal(choose_hot_keys(accessed, 2), [2, 5])
    np.testing.assert_array_equal(choose_hot_keys(accessed, 3), [2, 5, 9])
    assert choose_hot_keys(accessed, 0).size == 0


def test_the_example_prints_the_table_and_saves_the_chart(tmp_path, capsys):
    from minidist.examples import ps_hotspots

    runs = ps_hotspots.main(["--steps", "4", "--plot", str(tmp_path / "load.png")])
    assert set(runs) == set(ps_hotspots.SCHEMES) and (tmp_path / "load.png").stat().st_size
    errors = [error for _, error in runs.values()]
    assert max(errors) - min(errors) < 1e-9
    assert "busiest/mean" in capsys.readouterr().out


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_hogwild_and_the_parameter_server_reach_the_same_loss_after_equal_updates():
    """Bound: how many updates each loses or delays depends on the OS's scheduling;
    whatever it is, short of losing half, both beat the run with half the updates."""
    from minidist.parallel.ps.sparse_race import race, race_parameter_server

    untrained, (hogwild, server) = race(workers=2, steps=40, batch=128)
    assert hogwild.updates == server.updates == 80
    half = race_parameter_server(workers=2, steps=20, batch=128, backend="local")
    assert half.rmse < untrained
    assert hogwild.rmse < half.rmse and server.rmse < half.rmse, (hogwild, server, half)
