"""The cost model against the in-process transport's counters and virtual clock.

Bytes, messages and rounds must match exactly, per rank; the modelled time
must equal the slowest rank's clock.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from minidist.comm import ALGORITHMS, LocalCluster, NetworkModel, allreduce, cost
from minidist.comm.collectives.agreement import SMALL_BYTES
from minidist.comm.cost.mpich import FRESH_FROM, LocalPrices, load_local_prices, mpich_time

NETWORK = NetworkModel(alpha=2e-6, beta=3e-10, gamma=7e-11)


def measure(p: int, call) -> dict:
    cluster = LocalCluster(p, network=NETWORK)
    cluster.run(call)
    stats = cluster.stats
    return {"messages_sent": [s.messages_sent for s in stats],
            "messages_recv": [s.messages_recv for s in stats],
            "bytes_sent": [s.bytes_sent for s in stats],
            "bytes_recv": [s.bytes_recv for s in stats],
            "rounds": max(s.rounds for s in stats), "time": max(s.clock for s in stats)}


def assert_matches(measured: dict, predicted: cost.Cost, time_rtol: float = 1e-9) -> None:
    for key in ("messages_sent", "messages_recv", "bytes_sent", "bytes_recv", "rounds"):
        assert measured[key] == getattr(predicted, key), key
    assert measured["time"] == pytest.approx(predicted.time, rel=time_rtol, abs=1e-15)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("p", range(1, 9))
def test_counters_equal_the_model(algorithm: str, p: int) -> None:
    for n in sorted({0, 1, max(p - 1, 1), p + 1, 8 * p, 1009}):
        for dtype in (np.float32, np.int64):
            itemsize = np.dtype(dtype).itemsize
            measured = measure(p, lambda c, n=n, dtype=dtype: allreduce(
                np.ones(n, dtype), c, "sum", algorithm, check=False))
            predicted = cost.predict(algorithm, p, n * itemsize, itemsize, NETWORK)
            assert_matches(measured, predicted)


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_the_functions_called_directly_equal_schedule_cost(algorithm: str, p: int) -> None:
    """Called directly (as Lab 3's checks call an answer), an algorithm sends every message
    even at P = 1 or n = 0, each priced at its own size: ``cost.schedule_cost``."""
    run = ALGORITHMS[algorithm]
    for n in (0, 1, p + 1, 1009):
        measured = measure(p, lambda c, n=n: run(np.ones(n), c, "sum"))
        assert_matches(measured, cost.schedule_cost(algorithm, p, 8 * n, 8, NETWORK))


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 9, 12, 17])
def test_the_agreement_check(p: int) -> None:
    """check=True adds one recursive-doubling allreduce of a fixed-size packet; a short
    recursive-doubling allreduce travels inside that packet and costs nothing more. The
    trees start as each rank leaves the check: at P = 9 and 17 a tree's leaves start one
    message before the ranks folded into the check (the model summed the two before)."""
    for algorithm in ALGORITHMS:
        for n in (0, 1, 32, 33, 257, 1000):
            measured = measure(p, lambda c, n=n, a=algorithm: allreduce(np.ones(n), c, "sum", a))
            predicted = cost.predict(algorithm, p, 8 * n, 8, NETWORK, check=True)
            assert_matches(measured, predicted)
            if algorithm == "recursive_doubling" and p > 1 and 8 * n <= 256:
                assert measured["messages_sent"] == cost.recursive_doubling_cost(
                    p, 8, 8, NETWORK).messages_sent


@pytest.mark.parametrize("p", [2, 4, 8])
def test_course_formulas(p: int) -> None:
    """The lecture's figures, for N divisible by P: the model says what the slides say."""
    n_bytes = 8 * 1024 * p
    ring = cost.predict("ring", p, n_bytes, 8, NETWORK)
    assert ring.bytes_sent == [2 * (p - 1) * n_bytes // p] * p
    assert ring.rounds == 2 * (p - 1) and ring.fan_in == 1
    naive = cost.predict("naive", p, n_bytes, 8, NETWORK)
    assert naive.bytes_recv[0] == (p - 1) * n_bytes and naive.fan_in == p - 1
    ps = cost.predict("ps", p, n_bytes, 8, NETWORK)
    assert ps.bytes_recv == [2 * (p - 1) * n_bytes // p] * p
    doubling = cost.predict("recursive_doubling", p, n_bytes, 8, NETWORK)
    assert doubling.rounds == (p - 1).bit_length() and doubling.fan_in == 1
    double_tree = cost.predict("double_tree", p, n_bytes, 8, NETWORK)
    tree = cost.predict("tree", p, n_bytes, 8, NETWORK)
    assert double_tree.max_bytes_sent < tree.max_bytes_sent or p == 2
    # bandwidth-bound: the ring's time approaches 2(P-1)/P N beta + (P-1)/P N gamma
    big = cost.predict("ring", p, 1 << 30, 8, NETWORK)
    share = (p - 1) / p * (1 << 30)
    assert big.time == pytest.approx(2 * share * NETWORK.beta + share * NETWORK.gamma, rel=1e-3)


def test_predict_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="no cost model"):
        cost.predict("butterfly", 4, 64, 8, NETWORK)
    with pytest.raises(ValueError, match="whole number"):
        cost.predict("ring", 4, 63, 8, NETWORK)
    for args, named in [((0, 64, 8), "world_size"), ((2.5, 64, 8), "world_size"),
                        ((4, -8, 8), "nbytes"), ((4, 64, 0), "itemsize")]:
        with pytest.raises(ValueError, match=f"{named} must be an integer"):
            cost.predict("naive", *args, network=NETWORK)
        with pytest.raises(ValueError, match=f"{named} must be an integer"):
            cost.schedule_cost("tree", *args, network=NETWORK)
    for price in ("alpha", "beta", "gamma"):  # a negative or NaN price: an impossible clock
        for bad in (-1e-3, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"{price} must be a finite number >= 0"):
                NetworkModel(**{price: bad})
    with pytest.raises(ValueError, match="curve: beta and gamma"):
        NetworkModel(curve=((1024, -1e-10, 2e-11),))
    assert mpich_time(4, 1 << 20, NETWORK) <= cost.predict(
        "recursive_doubling", 4, 1 << 20, 8, NETWORK).time + (1 << 20) * NETWORK.gamma


CURVED = NetworkModel(2e-6, 3e-10, 7e-11, curve=((1024, 1e-10, 2e-11), (1 << 16, 2e-10, 5e-11),
                                                 (1 << 20, 4e-10, 1e-10)))


def test_a_bandwidth_curve_is_read_between_its_points() -> None:
    assert CURVED.beta_at(8) == 1e-10 and CURVED.beta_at(1 << 30) == 4e-10  # flat outside
    assert CURVED.beta_at(1 << 16) == 2e-10 and CURVED.gamma_at(1 << 16) == 5e-11
    # halfway in log2 size between 64 KiB and 1 MiB: halfway in beta
    assert CURVED.beta_at(1 << 18) == pytest.approx(3e-10)
    assert CURVED.message_time(1 << 18) == pytest.approx(2e-6 + 3e-10 * (1 << 18))
    flat = CURVED.at(1 << 18)
    assert not flat.curve and flat.beta == CURVED.beta_at(1 << 18)
    assert flat.gamma == CURVED.gamma_at(1 << 18) and NETWORK.at(1 << 18) is NETWORK
    with pytest.raises(ValueError, match="increasing"):
        NetworkModel(curve=((1 << 20, 1e-10, 1e-11), (1024, 1e-10, 1e-11)))


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("p", [2, 3, 4, 7])
def test_a_bandwidth_curve_prices_clock_and_model_alike(algorithm: str, p: int) -> None:
    """Every message of an allreduce on N bytes is priced at the curve's value for N."""
    for n in (1, 100, 5000, 40000):
        cluster = LocalCluster(p, network=CURVED)
        cluster.run(lambda c, n=n: allreduce(np.ones(n), c, "sum", algorithm, check=False))
        predicted = cost.predict(algorithm, p, 8 * n, 8, CURVED)
        flat = cost.predict(algorithm, p, 8 * n, 8, CURVED.at(8 * n))
        assert max(s.clock for s in cluster.stats) == pytest.approx(predicted.time, rel=1e-9)
        assert predicted.time == flat.time


def test_a_tree_on_two_ranks_is_up_then_down() -> None:
    """One edge, crossed twice in turn (the lab's schedule, no exchange): with the check,
    one more round for its packets. A vector of at most SMALL_BYTES rides in the check's
    packets instead (agreement.py's small-message path): one exchange in all."""
    for n in (1, 32, 33, 1000):
        measured = measure(2, lambda c, n=n: allreduce(np.ones(n), c, "sum", "tree"))
        assert_matches(measured, cost.predict("tree", 2, 8 * n, 8, NETWORK, check=True))
        rides = 8 * n <= SMALL_BYTES
        assert measured["rounds"] == (1 if rides else 3)
        assert measured["messages_sent"] == ([1, 1] if rides else [2, 2])
        unchecked = measure(2, lambda c, n=n: allreduce(np.ones(n), c, "sum", "tree",
                                                          check=False))
        assert unchecked["rounds"] == 2 and unchecked["messages_sent"] == [1, 1]


def test_only_the_latency_algorithms_ride_with_the_check() -> None:
    """The bandwidth algorithms keep their own schedule however short the vector."""
    for algorithm in ALGORITHMS:
        if algorithm == "mpi":
            continue
        measured = measure(4, lambda c, a=algorithm: allreduce(np.ones(4), c, "sum", a))
        rides = algorithm in ("recursive_doubling", "tree", "double_tree")
        assert (measured["rounds"] == 2) == rides, algorithm  # the check alone: log2 4 rounds


def test_mpich_model_is_rabenseifner_plus_a_copy() -> None:
    n = 1 << 20
    half = n / 2  # P = 2: one exchange of N/2 reduced, one exchange of N/2 gathered
    expected = n * NETWORK.gamma + 2 * NETWORK.message_time(half) + half * NETWORK.gamma
    assert mpich_time(2, n, NETWORK) == pytest.approx(expected)
    slow = LocalPrices(reduce=((n, 2 * NETWORK.gamma),), copy=((n, NETWORK.gamma),))
    assert mpich_time(2, n, NETWORK, slow) == pytest.approx(expected + half * NETWORK.gamma)
    assert mpich_time(1, n, NETWORK) == 0.0 and mpich_time(4, 0, NETWORK) == 0.0


def test_mpich_model_charges_fresh_pages_only_for_long_vectors() -> None:
    faulting = LocalPrices(page_fault=1e-10)
    short, long = FRESH_FROM // 2, FRESH_FROM
    assert mpich_time(2, short, NETWORK, faulting) == mpich_time(2, short, NETWORK)
    # at P = 2 the temporary buffer receives half the vector
    assert mpich_time(2, long, NETWORK, faulting) == pytest.approx(
        mpich_time(2, long, NETWORK) + long / 2 * 1e-10)


def test_mpich_prices_come_from_the_saved_fit(tmp_path) -> None:  # noqa: ANN001
    saved = tmp_path / "network.json"
    saved.write_text(json.dumps({"alpha": 1e-6, "beta": 1e-10, "gamma": 1e-10,
                                 "mpi_reduce_s": {"1024": 2e-7, "256": 1e-7},
                                 "copy_s": {"1024": 1e-7}, "page_fault_s_per_byte": 3e-10}))
    prices = load_local_prices(str(saved))
    assert prices.reduce == ((256, 1e-7 / 256), (1024, 2e-7 / 1024))
    assert prices.copy == ((1024, 1e-7 / 1024),) and prices.page_fault == 3e-10
    assert load_local_prices(str(tmp_path / "missing.json")) == LocalPrices()
