"""FedAvg through the parameter server, on in-process ranks: against one process, the
weighted average against numpy's, the traffic against the docstring's cost, the splits,
the cost of non-IID data, and bad input.

float64 throughout; 1e-12 where the order of floating-point additions differs (the
servers sum the clients' pushes; a full batch is summed in a shuffled order).
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from ps_construction import construction_traffic

import minidist as md
from minidist.comm import LocalCluster, RankError
from minidist.examples.fedavg import train_centralised
from minidist.models.mlp import classification_loss
from minidist.optim import SGD
from minidist.parallel.ps import gather_reports
from minidist.parallel.ps.fedavg import (
    fedavg,
    float64_mlp,
    local_sgd,
    round_bytes,
    select_clients,
    split_clients,
    split_dirichlet,
    split_iid,
    split_noniid,
)
from minidist.parallel.ps.messages import HEADER_BYTES
from minidist.parallel.ps.training import digits, mlp_layout

MPIEXEC = Path(sys.executable).parent / "mpiexec"
TRAIN, TEST = digits(np.float64)
HIDDEN, LR, TOL = 16, 0.1, 1e-12


def run(clients, servers=1, **options):
    """Every rank's FedRun; the global model after the last round (from the servers)."""
    options = dict(hidden=HIDDEN, lr=LR, servers=servers) | options
    runs = LocalCluster(servers + clients).run(lambda c: fedavg(c, **options))
    model = float64_mlp(options["hidden"], options.get("seed", 0))
    final = gather_reports([r.report for r in runs[:servers]], mlp_layout(model))
    return runs, final


def flat(model):
    return mlp_layout(model).flatten({n: p.data for n, p in model.named_parameters()})


def test_one_client_one_round_is_local_sgd():
    """K = 1, full batches: one round of E local epochs is E steps of SGD on all the data."""
    epochs = 3
    _, final = run(1, rounds=1, local_epochs=epochs, batch_size=None)
    model = float64_mlp(HIDDEN, 0)
    opt = SGD(model.parameters(), lr=LR)
    for _ in range(epochs):
        opt.zero_grad()
        classification_loss(model, TRAIN.x, TRAIN.y).backward()
        opt.step()
    np.testing.assert_allclose(final, flat(model), rtol=0, atol=TOL)


@pytest.mark.parametrize("servers", [1, 2])
def test_clients_with_identical_shards_are_one_client(servers):
    everything = np.arange(len(TRAIN))
    options = dict(rounds=2, local_epochs=2, batch_size=None)
    _, one = run(1, split=[everything], **options)
    _, three = run(3, servers=servers, split=[everything] * 3, **options)
    np.testing.assert_allclose(three, one, rtol=0, atol=TOL)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_the_servers_hold_the_weighted_mean_of_the_clients_models(fraction):
    """One round on unequal (non-IID) shards: the pushes' arithmetic gives
    Σ_{k in S} n_k/n_S w_k, as numpy's weighted mean of the clients' own models."""
    clients, seed = 4, 3
    _, final = run(clients, servers=2, rounds=1, split="noniid", fraction=fraction, seed=seed)
    shards = split_noniid(TRAIN.y, clients, seed=seed)
    chosen = select_clients(clients, fraction, 0, seed)
    assert len(chosen) == round(fraction * clients)
    models = []
    for k in chosen:
        model = float64_mlp(HIDDEN, seed)
        local_sgd(model, TRAIN.x[shards[k]], TRAIN.y[shards[k]], 1, 10, LR,
                  np.random.default_rng((seed, 0, k)))
        models.append(flat(model))
    weights = [len(shards[k]) for k in chosen]
    assert len(set(weights)) > 1  # the weights matter
    np.testing.assert_allclose(final, np.average(models, axis=0, weights=weights),
                               rtol=0, atol=TOL)


def test_traffic_per_client_per_round_is_the_docstring_cost():
    clients, servers, rounds = 3, 2, 3
    cluster = LocalCluster(servers + clients)
    runs = cluster.run(lambda c: fedavg(c, rounds=rounds, hidden=HIDDEN, servers=servers,
                                        fraction=0.34, split="iid"))
    layout = mlp_layout(float64_mlp(HIDDEN, 0))
    k, v, S, h = layout.num_keys, layout.num_values, servers, HEADER_BYTES
    rows = sum(int(layout.widths[first]) for first, _ in layout.split(servers))
    assert round_bytes(layout, S) == (3 * h * S + 16 * k + 8 * v, 16 * S + 8 * v)
    assert round_bytes(layout, S, selected=False) == ((2 * h + 8) * S + 8 * rows, 8 * S)
    (sent_in, recv_in), (sent_out, recv_out) = (round_bytes(layout, S, selected)
                                                for selected in (True, False))
    built = construction_traffic(servers + clients)  # the agreement on the job
    for client in range(1, clients):  # client 0 also pulls to score: not FedAvg's cost
        picked = sum(client in chosen for chosen in runs[0].selected)
        assert 0 < picked < rounds  # both kinds of round are counted
        stats, before = cluster.stats[servers + client], built[servers + client]
        unpicked = rounds - picked
        assert stats.bytes_sent - before.bytes_sent \
            == picked * sent_in + unpicked * sent_out + h * S  # + STOP
        assert stats.bytes_recv - before.bytes_recv == picked * recv_in + unpicked * recv_out


def federate(c, servers):
    """Two rounds on 3 clients, C = 2/3, non-IID: servers return their shard, client 0 its
    accuracies, the others nothing."""
    run = fedavg(c, rounds=2, hidden=HIDDEN, lr=LR, servers=servers, split="noniid",
                 fraction=0.67, seed=1)
    return run.report.values if run.report is not None else run.accuracy


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")
@pytest.mark.timeout(90)
def test_under_mpi_equals_in_process():
    """Under MPI the servers take pushes as they arrive: another order of additions."""
    got = md.launch(federate, 5, args=(2,), backend="mpi", timeout=80)
    expected = LocalCluster(5).run(federate, args=(2,))
    for server in range(2):
        np.testing.assert_allclose(got[server], expected[server], rtol=0, atol=TOL)
    assert got[2] == expected[2] and len(got[2]) == 3


@pytest.mark.parametrize("name", ["iid", "noniid", "dirichlet"])
def test_a_split_gives_every_sample_to_one_client(name):
    shards = split_clients(name, TRAIN.y, 7, seed=1, alpha=0.3)
    assert len(shards) == 7 and min(len(s) for s in shards) > 0
    np.testing.assert_array_equal(np.sort(np.concatenate(shards)), np.arange(len(TRAIN)))


def test_pathological_shards_hold_few_classes_and_iid_all():
    classes = [len(np.unique(TRAIN.y[s])) for s in split_noniid(TRAIN.y, 8, seed=0)]
    assert max(classes) <= 4 and np.median(classes) <= 3
    assert all(len(np.unique(TRAIN.y[s])) == 10 for s in split_iid(TRAIN.y, 8, seed=0))
    small = [len(np.unique(TRAIN.y[s])) for s in split_dirichlet(TRAIN.y, 8, 0.1, seed=0)]
    assert np.median(small) < 10


def test_iid_is_near_centralised_and_noniid_costs_accuracy():
    """K = 4, 6 rounds of one epoch, hidden 64, seed 0: centralised 95.8%, IID 94.7%,
    non-IID 90.0% (over seeds 0-4: IID within 1.1-2.8 points of centralised, non-IID
    3.6-5.0 points below IID)."""
    options = dict(rounds=6, local_epochs=1, hidden=64)
    iid = run(4, split="iid", **options)[0][1]
    noniid = run(4, split="noniid", **options)[0][1]
    central = train_centralised(iid.samples, lr=LR, hidden=64)
    assert iid.samples == noniid.samples == central.samples  # the same work
    assert len(iid.accuracy) == len(central.accuracy) == 7
    assert iid.accuracy[-1] >= central.accuracy[-1] - 0.03
    assert noniid.accuracy[-1] <= iid.accuracy[-1] - 0.02
    assert np.mean(noniid.accuracy[1:]) < np.mean(iid.accuracy[1:])


@pytest.mark.parametrize("options, message", [
    (dict(clients=0), "at least one client"),
    (dict(fraction=0.0), r"fraction C .* \(0, 1\]"),
    (dict(fraction=1.5), r"fraction C .* \(0, 1\]"),
    (dict(local_epochs=0), "local epochs E"),
    (dict(rounds=0), "rounds"),
    (dict(batch_size=0), "batch size B"),
    (dict(split="sorted"), "split must be one of"),
    (dict(split=[np.arange(5)]), "1 shards given for 2 clients"),
    (dict(split=[np.arange(5), np.array([5, 10**6])]), "client 1's shard"),
])
def test_bad_input_is_a_clear_error(options, message):
    options = dict(rounds=1, hidden=HIDDEN) | options
    clients = options.pop("clients", 2)
    with pytest.raises(RankError, match=message):
        LocalCluster(1 + clients).run(lambda c: fedavg(c, **options))


def test_bad_split_input_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one client"):
        split_iid(TRAIN.y, 0)
    with pytest.raises(ValueError, match="alpha > 0"):
        split_dirichlet(TRAIN.y, 4, alpha=0)
    with pytest.raises(ValueError, match="fraction C"):
        select_clients(4, -0.5, 0)


def test_the_example_prints_three_runs_a_summary_and_a_plot(tmp_path, capsys):
    from minidist.examples.fedavg import main

    path = tmp_path / "fedavg.png"
    runs = main(["--clients", "3", "--rounds", "2", "--hidden", "16", "--split", "dirichlet",
                 "--quiet", "--plot", str(path)])
    assert list(runs) == ["centralised SGD", "FedAvg, iid shards", "FedAvg, dirichlet shards"]
    assert all(len(run.accuracy) == 3 for run in runs.values())
    out = capsys.readouterr().out
    assert "dirichlet shards" in out and "points against IID" in out and "K=3" in out
    assert path.stat().st_size > 0
