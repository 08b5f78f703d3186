"""Every allreduce algorithm against numpy, on the in-process transport.

All world sizes 1-8, awkward lengths (0, 1, P-1, P+1, primes), the four
dtypes and the four ops; identical bits on every rank; mismatched
arguments raise on every rank.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidist.comm import ALGORITHMS, LocalCluster, allreduce
from minidist.comm.collectives.tree import Mirrored

DTYPES = [np.float32, np.float64, np.int32, np.int64]
OPS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}
WORLD_SIZES = range(1, 9)


def rank_data(rank: int, n: int, dtype: type, seed: int = 0) -> np.ndarray:
    """Small integers (exact in every dtype, even multiplied over 8 ranks), per rank."""
    rng = np.random.default_rng([seed, rank, n])
    return rng.integers(-3, 4, n).astype(dtype)


def reference(p: int, n: int, dtype: type, op: str, seed: int = 0) -> np.ndarray:
    stacked = np.stack([rank_data(r, n, dtype, seed) for r in range(p)])
    return OPS[op](stacked, axis=0).astype(dtype)


def lengths(p: int) -> list[int]:
    return sorted({0, 1, max(p - 1, 0), p + 1, 37, 1009})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("p", WORLD_SIZES)
def test_allreduce_matches_numpy(algorithm: str, p: int) -> None:
    cases = [(n, dtype, op) for n in lengths(p) for dtype in DTYPES for op in OPS]

    def body(c):
        results = []
        for n, dtype, op in cases:
            arr = rank_data(c.rank, n, dtype)
            before = arr.copy()
            out = allreduce(arr, c, op, algorithm)
            assert np.array_equal(arr, before), "allreduce changed its input"
            results.append(out)
        return results

    per_rank = LocalCluster(p).run(body)
    for k, (n, dtype, op) in enumerate(cases):
        expected = reference(p, n, dtype, op)
        for rank in range(p):
            got = per_rank[rank][k]
            assert got.dtype == np.dtype(dtype) and got.shape == (n,)
            assert np.array_equal(got, expected), (algorithm, p, n, dtype, op, rank)


def noisy_data(rank: int) -> np.ndarray:
    """Floats over 16 orders of magnitude: their sum depends on the order of additions."""
    rng = np.random.default_rng(rank)
    return rng.standard_normal(1001) * 10.0 ** rng.integers(-8, 8, 1001)


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("p", [3, 5, 8])
def test_same_bits_on_every_rank(algorithm: str, p: int) -> None:
    """Random floats (summation order matters), signed zeros (max/min order matters) and
    NaNs of different payloads, one value long too (numpy's add of one element written
    over its first operand took the second's payload: ranks differed)."""
    def body(c):
        noisy = noisy_data(c.rank)
        zeros = np.where(np.random.default_rng(c.rank).random(64) < 0.5, 0.0, -0.0)
        nans = np.full(3, 0x7FF8000000000000 | (c.rank + 1), np.uint64).view(np.float64)
        return (allreduce(noisy, c, "sum", algorithm),
                allreduce(noisy.astype(np.float32), c, "sum", algorithm),
                allreduce(zeros, c, "max", algorithm), allreduce(zeros, c, "min", algorithm),
                allreduce(nans, c, "sum", algorithm), allreduce(nans[:1], c, "sum", algorithm))

    per_rank = LocalCluster(p).run(body)
    for k in range(6):
        assert len({r[k].tobytes() for r in per_rank}) == 1, (algorithm, k)
    exact = np.sum([noisy_data(r) for r in range(p)], axis=0)
    np.testing.assert_allclose(per_rank[0][0], exact, rtol=1e-6, atol=1e-8 * np.abs(exact).max())


@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_in_place_and_shapes(algorithm: str) -> None:
    def body(c):
        grid = np.arange(24, dtype=np.float64).reshape(2, 3, 4) * (c.rank + 1)
        out_of_place = allreduce(grid, c, "sum", algorithm)
        same = grid.copy()
        returned = allreduce(same, c, "sum", algorithm, out=same)
        target = np.empty_like(grid)
        allreduce(grid, c, "max", algorithm, out=target)
        return out_of_place, same, returned is same, target

    p = 5
    factor = p * (p + 1) / 2
    for out_of_place, same, is_same, target in LocalCluster(p).run(body):
        expected = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
        assert np.array_equal(out_of_place, expected * factor)
        assert np.array_equal(same, expected * factor) and is_same
        assert np.array_equal(target, expected * p)


@pytest.mark.parametrize("algorithm", [name for name in ALGORITHMS if name != "mpi"])
@pytest.mark.parametrize("p", [1, 2, 3, 6])
def test_the_algorithm_functions_reduce_in_place(algorithm: str, p: int) -> None:
    """Each algorithm, called directly as Lab 3 calls an answer: ``x`` itself holds the
    result and is returned, for every length (0 and n < P included)."""
    run = ALGORITHMS[algorithm]

    def body(c):
        results = []
        for n in (0, 1, p + 1, 103):
            x = rank_data(c.rank, n, np.int64)
            results.append((n, x, run(x, c, "sum")))
        return results

    for rank_results in LocalCluster(p).run(body):
        for n, x, returned in rank_results:
            assert returned is x and np.array_equal(x, reference(p, n, np.int64, "sum"))


@pytest.mark.parametrize("p", range(2, 12))
def test_the_double_tree_halves_the_busiest_ranks_load(p: int) -> None:
    """A rank with children in one tree is a leaf in the other (NCCL 2.4's property): no
    rank sends more than 2N, where one tree makes an interior rank send 3N (P >= 4)."""
    n = 1000

    def busiest(algorithm: str) -> int:
        cluster = LocalCluster(p)
        cluster.run(lambda c: allreduce(np.ones(n), c, "sum", algorithm, check=False))
        return max(s.bytes_sent for s in cluster.stats)

    assert busiest("double_tree") <= 2 * 8 * n
    assert busiest("tree") == (3 if p >= 5 else 2 if p >= 3 else 1) * 8 * n


def test_mirrored_renames_ranks_both_ways() -> None:
    def body(c):
        mirror = Mirrored(c)
        got = np.zeros(1)
        if mirror.rank == 0:  # rank P-1 of c
            mirror.send(np.array([float(c.rank)]), 1)  # to rank P-2 of c
        elif mirror.rank == 1:
            mirror.recv(got, 0)
        return mirror.rank, float(got[0])

    assert LocalCluster(4).run(body) == [(3, 0.0), (2, 0.0), (1, 3.0), (0, 0.0)]


def test_the_algorithms_never_meet_user_messages() -> None:
    """A user's message with the default tag, pending across an allreduce, is not taken by
    the algorithm (which sends tag 0 too, on ``c.private()``), and takes nothing from it."""
    def body(c):
        peer = 1 - c.rank
        mine = np.full(3, 10.0 + c.rank)
        c.send(mine, peer)  # buffered: in flight during the allreduces
        results = [allreduce(np.ones(3) * (c.rank + 1), c, "sum", a).tolist() for a in ALGORITHMS]
        theirs = c.recv(np.empty(3), peer)
        return results, theirs.tolist()

    for rank, (results, theirs) in enumerate(LocalCluster(2).run(body)):
        assert results == [[3.0] * 3] * len(ALGORITHMS)
        assert theirs == [11.0 - rank] * 3


def _errors_on_every_rank(p: int, call) -> list[str]:
    def body(c):
        try:
            call(c)
        except (ValueError, TypeError) as err:
            return f"{type(err).__name__}: {err}"
        return "no error"
    return LocalCluster(p).run(body, timeout=30)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
@pytest.mark.parametrize("p", [2, 3, 5])
def test_mismatch_raises_on_every_rank(algorithm: str, p: int) -> None:
    last = p - 1
    mismatches = {
        "length": lambda c: allreduce(np.ones(10 + (c.rank == last)), c, "sum", algorithm),
        "dtype": lambda c: allreduce(np.ones(10, np.float32 if c.rank else np.float64), c,
                                     "sum", algorithm),
        "op": lambda c: allreduce(np.ones(10), c, "max" if c.rank == last else "sum", algorithm),
        "algorithm": lambda c: allreduce(np.ones(10), c, "sum",
                                         "naive" if c.rank == last else algorithm),
        "unsupported dtype": lambda c: allreduce(np.ones(10, np.float16 if c.rank == last
                                                         else np.float32), c, "sum", algorithm),
    }
    for what, call in mismatches.items():
        if what == "algorithm" and algorithm == "naive":
            continue
        messages = _errors_on_every_rank(p, call)
        word = "dtype" if what == "unsupported dtype" else what
        assert all(word in m and "Error" in m for m in messages), (what, messages)


def test_local_errors() -> None:
    messages = _errors_on_every_rank(2, lambda c: allreduce(np.ones(3), c, "mean"))
    assert all("op" in m for m in messages)
    messages = _errors_on_every_rank(2, lambda c: allreduce(np.ones(3), c, "sum", "butterfly"))
    assert all("unknown algorithm" in m for m in messages)
    messages = _errors_on_every_rank(
        1, lambda c: allreduce(np.ones(3), c, out=np.empty(4)))
    assert "out must be" in messages[0]
    messages = _errors_on_every_rank(1, lambda c: allreduce(np.ones(3), c, out=[0.0] * 3))
    assert "out must be" in messages[0]
    messages = _errors_on_every_rank(
        1, lambda c: (lambda a: allreduce(a[:3], c, out=a[1:]))(np.ones(4)))
    assert "out overlaps arr" in messages[0]


@settings(max_examples=25, deadline=None)
@given(p=st.integers(1, 8), n=st.integers(0, 40), algorithm=st.sampled_from(list(ALGORITHMS)),
       op=st.sampled_from(list(OPS)), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 99))
def test_allreduce_property(p: int, n: int, algorithm: str, op: str, dtype: type,
                            seed: int) -> None:
    per_rank = LocalCluster(p).run(
        lambda c: allreduce(rank_data(c.rank, n, dtype, seed), c, op, algorithm))
    expected = reference(p, n, dtype, op, seed)
    assert all(np.array_equal(r, expected) for r in per_rank)


def test_allreduce_tour_agrees_with_the_model() -> None:
    from minidist.comm import launch
    from minidist.examples.allreduce_tour import tour

    for p in (1, 5):
        rows = launch(tour, p, args=(101,), backend="local")[0]
        assert [row["algorithm"] for row in rows] == list(ALGORITHMS)
        for row in rows:
            assert row["correct"], row
            assert row["bytes"] == row["model_bytes"], row
            assert row["messages"] == row["model_messages"] and row["rounds"] == row["model_rounds"]
            assert row["clock"] == pytest.approx(row["model_time"], rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("shape, dtype", [((1024,), np.float32), ((3, 4096), np.float64),
                                          ((5000,), np.int8), ((7,), np.float64), ((0,), np.uint8)])
def test_page_aligned_empty_starts_on_a_page_from_a_page_up(shape, dtype) -> None:
    from minidist.util.pages import PAGE, page_aligned_empty

    a = page_aligned_empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    if a.nbytes >= PAGE:
        assert a.ctypes.data % PAGE == 0
    a[...] = 1  # the whole of it is usable memory
    assert a.sum() == a.size


def test_the_library_s_own_buffers_start_on_a_page() -> None:
    """Where two buffers lie within a page can slow a copy between them (util/pages.py):
    a communicator's receive buffers and allreduce's result, when it makes one, start on one."""
    def body(c):
        x = np.arange(8192, dtype=np.float64)
        result = allreduce(x, c, algorithm="ring")
        kept = c.scratch(1 << 15, np.float32)
        return [a.ctypes.data % 4096 for a in (result, kept)], result[5]

    for offsets, value in LocalCluster(2).run(body):
        assert offsets == [0, 0] and value == 10.0
