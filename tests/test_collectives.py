"""The collectives against numpy on the in-process transport: world sizes 1-8, awkward shapes."""

from __future__ import annotations

import numpy as np
import pytest

from minidist.comm import (
    LocalCluster,
    NetworkModel,
    allgather,
    alltoall,
    barrier,
    broadcast,
    chunk_bounds,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)

DTYPES = [np.float32, np.float64, np.int32, np.int64]
OPS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}


def rank_data(rank: int, shape: tuple, dtype: type) -> np.ndarray:
    rng = np.random.default_rng([rank, *shape])
    return rng.integers(-3, 4, shape).astype(dtype)


def shapes(p: int) -> list[tuple]:
    return [(0,), (1,), (max(p - 1, 1),), (p + 1,), (37,), (3, 5)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("p", range(1, 9))
def test_collectives_match_numpy(p: int) -> None:
    roots = sorted({0, p // 2, p - 1})
    cases = [(shape, dtype) for shape in shapes(p) for dtype in DTYPES]

    def body(c):
        out = []
        for shape, dtype in cases:
            x = rank_data(c.rank, shape, dtype)
            rows = np.stack([x * 10 + k for k in range(p)])
            for root in roots:
                out.append(broadcast(x, c, root, "binomial"))
                out.append(broadcast(x, c, root, "linear"))
                out.append(gather(x, c, root))
                out.append(scatter(rows, c, root))
                out.extend(reduce(x, c, root, op) for op in OPS)
            out.append(allgather(x, c))
            out.extend(reduce_scatter(x, c, op) for op in OPS)
            out.append(alltoall(rows, c))
        return out

    per_rank = LocalCluster(p).run(body)
    for rank in range(p):
        got = iter(per_rank[rank])
        for shape, dtype in cases:
            data = [rank_data(r, shape, dtype) for r in range(p)]
            for root in roots:
                assert np.array_equal(next(got), data[root])
                assert np.array_equal(next(got), data[root])
                gathered = next(got)
                if rank == root:
                    assert np.array_equal(gathered, np.stack(data))
                else:
                    assert gathered is None
                assert np.array_equal(next(got), data[root] * 10 + rank)
                for op, fn in OPS.items():
                    reduced = next(got)
                    if rank == root:
                        assert np.array_equal(reduced, fn(np.stack(data), axis=0).astype(dtype)), op
                    else:
                        assert reduced is None
            assert np.array_equal(next(got), np.stack(data))
            lo, hi = chunk_bounds(int(np.prod(shape)), p)[rank]
            for op, fn in OPS.items():
                full = fn(np.stack(data), axis=0).astype(dtype).reshape(-1)
                assert np.array_equal(next(got), full[lo:hi]), (op, shape)
            assert np.array_equal(next(got), np.stack([d * 10 + rank for d in data]))


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_dissemination_barrier_waits_for_the_slowest(p: int) -> None:
    """Rank r computes r seconds (virtual); nobody leaves the barrier before P-1 seconds."""
    def body(c):
        c.compute(float(c.rank))
        barrier(c)
        return c.stats.clock

    clocks = LocalCluster(p, network=NetworkModel(1e-6, 1e-9, 0.0)).run(body)
    assert all(clock >= p - 1 for clock in clocks)


@pytest.mark.parametrize("p", [1, 2, 3, 4, 7, 8])
def test_broadcast_rounds(p: int) -> None:
    """Binomial: ceil(log2 P) message times on the critical path; linear: P-1."""
    network = NetworkModel(alpha=1.0, beta=0.0, gamma=0.0)
    for algorithm, expected in (("binomial", (p - 1).bit_length()), ("linear", p - 1)):
        cluster = LocalCluster(p, network=network)
        cluster.run(lambda c, a=algorithm: broadcast(np.ones(3), c, 0, a, check=False))
        assert max(s.rounds for s in cluster.stats) == expected
        assert sum(s.bytes_recv for s in cluster.stats) == (p - 1) * 24


@pytest.mark.parametrize("p", [2, 3, 6])
def test_ring_collectives_traffic(p: int) -> None:
    """allgather sends (P-1)N per rank; reduce_scatter (P-1)/P·N, both in P-1 rounds."""
    n = 12 * p
    for call, per_rank in ((lambda c: allgather(np.ones(n), c, check=False), (p - 1) * n * 8),
                           (lambda c: reduce_scatter(np.ones(n), c, check=False),
                            (p - 1) * n // p * 8)):
        cluster = LocalCluster(p, network=NetworkModel(1.0, 0.0, 0.0))
        cluster.run(call)
        assert [s.bytes_sent for s in cluster.stats] == [per_rank] * p
        assert max(s.rounds for s in cluster.stats) == p - 1


def _messages(p: int, call) -> list[str]:
    def body(c):
        try:
            call(c)
        except (ValueError, TypeError) as err:
            return str(err)
        return "no error"
    return LocalCluster(p, recv_timeout=5.0).run(body, timeout=30)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("p", [2, 3])
def test_mismatches_raise_on_every_rank(p: int) -> None:
    last = p - 1
    calls = {
        "root": lambda c: broadcast(np.ones(4), c, root=c.rank == last),
        "length": lambda c: reduce(np.ones(4 + (c.rank == last)), c),
        "dtype": lambda c: allgather(np.ones(4, np.int32 if c.rank == last else np.int64), c),
        "op": lambda c: reduce_scatter(np.ones(4), c, "min" if c.rank == last else "max"),
        "leading": lambda c: alltoall(np.ones((2 * p, 1) if c.rank == last else (p, 2)), c),
    }
    for what, call in calls.items():
        messages = _messages(p, call)
        assert all(what in m for m in messages), (what, messages)
    messages = _messages(p, lambda c: scatter(np.ones((p + 1, 2)), c))
    assert all("first axis" in m for m in messages)


@pytest.mark.parametrize("n", [0, 1, 5, 8, 13])
@pytest.mark.parametrize("p", [1, 3, 8])
def test_chunk_bounds(n: int, p: int) -> None:
    bounds = chunk_bounds(n, p)
    sizes = [hi - lo for lo, hi in bounds]
    assert bounds[0][0] == 0 and bounds[-1][1] == n and len(bounds) == p
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
