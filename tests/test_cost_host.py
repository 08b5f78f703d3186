"""The shared memory bus: an option of the cost model for ranks of one host (MPI runs).

The in-process clock keeps independent links (tests/test_cost.py); these check the
rule ``t · max(1, k/S) / max(1, 2/S)`` and that it is applied only when asked for.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from minidist.comm import LocalCluster, NetworkModel, allreduce, cost, load_network_model
from minidist.comm.cost.mpich import mpich_time

MIB64 = 64 << 20
LINKS = NetworkModel(alpha=5e-6, beta=1e-10, gamma=5e-11)


def on_a_host(streams: float, ranks_per_host: int = 0) -> NetworkModel:
    """LINKS on a host whose bus carries ``streams`` full-speed copies (B_1 = 10 GB/s)."""
    return NetworkModel(LINKS.alpha, LINKS.beta, LINKS.gamma, ranks_per_host=ranks_per_host,
                        host_curve=((1 << 16, 1e10, streams * 1e10),))


def test_the_sharing_rule() -> None:
    nine = on_a_host(9)
    assert [nine.sharing(k, MIB64) for k in (1, 2, 9)] == [1.0, 1.0, 1.0]
    assert nine.sharing(16, MIB64) == pytest.approx(16 / 9)
    # a bus that two ranks already fill: the fit's beta and gamma carry that sharing, so one
    # rank alone is faster than fitted, and 4 ranks twice as slow
    full = on_a_host(1.25)
    assert full.sharing(1, MIB64) == pytest.approx(1 / 1.6)
    assert full.sharing(4, MIB64) == pytest.approx(2.0)
    assert on_a_host(1.25, ranks_per_host=2).sharing(4, MIB64) == 1.0  # k capped
    assert LINKS.sharing(16, MIB64) == 1.0  # no host_curve: independent links


def test_the_bus_is_read_off_its_curve_and_dropped_by_shared() -> None:
    net = NetworkModel(host_curve=((1 << 20, 1e10, 8e10), (1 << 22, 1e10, 2e10)))
    assert net.sharing(16, 1 << 21) == pytest.approx(16 / 5)  # S halfway in log2 size
    assert net.sharing(16, 1 << 30) == pytest.approx(16 / 2)  # flat beyond the last point
    shared = net.shared(16, 1 << 21)
    assert not shared.host_curve and shared.beta == pytest.approx(net.beta * 16 / 5)
    assert shared.gamma == pytest.approx(net.gamma * 16 / 5) and shared.alpha == net.alpha
    assert net.at(1 << 21).host_curve == net.host_curve


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_predict_with_the_bus_slows_only_the_steps_that_fill_it(p: int) -> None:
    """S = 4: the ring (every rank at once) slows by P/4 from P = 4 on; naive never (its
    root works alone); the heap tree by its widest level's transfers."""
    bus = on_a_host(4)
    for algorithm, k in (("ring", p), ("ps", p), ("recursive_doubling", p), ("naive", 1),
                         ("tree", {2: 1, 4: 1, 8: 2, 16: 4}[p])):
        alone = cost.predict(algorithm, p, MIB64, 4, LINKS)
        shared = cost.predict(algorithm, p, MIB64, 4, bus)
        latency = cost.predict(algorithm, p, MIB64, 4, NetworkModel(LINKS.alpha, 0.0, 0.0))
        slower = max(1.0, k / 4)
        assert shared.time - latency.time == pytest.approx(slower * (alone.time - latency.time))
        assert shared.bytes_sent == alone.bytes_sent and shared.rounds == alone.rounds
    assert mpich_time(p, MIB64, bus) == pytest.approx(max(1.0, p / 4) * mpich_time(
        p, MIB64, LINKS) - (max(1.0, p / 4) - 1) * 2 * (p.bit_length() - 1) * LINKS.alpha)


def test_the_in_process_clock_keeps_independent_links() -> None:
    """Ranks in one process share no bus: given a model with one, the clock ignores it."""
    bus = on_a_host(1.25)
    cluster = LocalCluster(8, network=bus)
    cluster.run(lambda c: allreduce(np.ones(1 << 10), c, "sum", "ring", check=False))
    links = dataclasses.replace(bus, host_curve=())
    assert max(s.clock for s in cluster.stats) == pytest.approx(
        cost.predict("ring", 8, 8 << 10, 8, links).time, rel=1e-12)


def test_the_saved_bus_is_loaded_only_when_asked(tmp_path) -> None:  # noqa: ANN001
    saved = tmp_path / "network.json"
    saved.write_text(json.dumps({"alpha": 1e-6, "beta": 1e-10, "gamma": 1e-10,
                                 "host_curve": [[65536, 1e10, 2e10]]}))
    assert load_network_model(saved).host_curve == ()  # the clock's model: independent links
    assert load_network_model(saved, host=True).host_curve == ((65536, 1e10, 2e10),)


def test_a_bus_that_makes_no_sense_is_refused() -> None:
    with pytest.raises(ValueError, match="host_curve: points"):
        NetworkModel(host_curve=((1 << 20, 1e10, 2e10), (1024, 1e10, 2e10)))
    with pytest.raises(ValueError, match="bandwidths must be finite and positive"):
        NetworkModel(host_curve=((1024, 0.0, 2e10),))
    with pytest.raises(ValueError, match="ranks_per_host"):
        NetworkModel(ranks_per_host=-1)
    # taken once, and then ignored: a NaN bus was no bus (sharing 1), a size twice a curve
    for nan_bus in (((1024, float("nan"), 2e10),), ((1024, 1e10, float("inf")),)):
        with pytest.raises(ValueError, match="bandwidths must be finite and positive"):
            NetworkModel(host_curve=nan_bus)
    for ranks in (1.5, True):
        with pytest.raises(ValueError, match="ranks_per_host must be an integer >= 0"):
            NetworkModel(ranks_per_host=ranks)
    with pytest.raises(ValueError, match="curve: points must have positive, increasing sizes"):
        NetworkModel(curve=((8, 1e-9, 1e-10), (8, 2e-9, 1e-10)))


def test_k_concurrent_copies_measure_the_bus() -> None:
    from minidist.bench.fit import host_copy_bandwidth

    alone, together = host_copy_bandwidth(1 << 20, 2)
    assert 0 < alone <= together  # the most of k = 1, 2: at least what one copies alone


def test_the_benchmark_prices_with_the_median_of_its_rounds() -> None:
    from minidist.bench.pricing import median_fit
    from minidist.comm.cost.mpich import LocalPrices

    fits = [(NetworkModel(a, b, g, curve=((1024, b, g),)),
             LocalPrices(((1024, r),), ((1024, c),), 0.0))
            for a, b, g, r, c in ((1e-6, 1e-10, 3e-11, 1e-10, 5e-11),
                                  (9e-6, 5e-10, 1e-11, 3e-10, 1e-11),
                                  (2e-6, 2e-10, 2e-11, 2e-10, 2e-11))]
    net, local = median_fit(fits, ((1024, 1e10, 2e10),))
    assert (net.alpha, net.beta, net.gamma) == (2e-6, 2e-10, 2e-11)
    assert net.curve == ((1024, 2e-10, 2e-11),) and net.host_curve == ((1024, 1e10, 2e10),)
    assert local == LocalPrices(((1024, 2e-10),), ((1024, 2e-11),), 0.0)
