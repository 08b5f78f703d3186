"""Every collective and allreduce algorithm under a real mpiexec, world sizes 1-4.

One launch per world size runs all the checks (starting MPI costs ~0.5 s);
each rank returns its results and the parent compares them with numpy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import minidist as md

MPIEXEC = Path(sys.executable).parent / "mpiexec"
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]

DTYPES = [np.float32, np.float64, np.int32, np.int64]
OPS = ["sum", "max", "min", "prod"]


def rank_data(rank: int, n: int, dtype: type) -> np.ndarray:
    return np.random.default_rng([rank, n]).integers(-3, 4, n).astype(dtype)


def lengths(p: int) -> list[int]:
    return sorted({0, 1, p + 1, 37, 4099})


def alltoallv_counts(sender: int, p: int) -> list[int]:
    return [(sender + 2 * j) % (p + 1) for j in range(p)]


def alltoallv_rows(sender: int, p: int, dtype: type) -> np.ndarray:
    """Rows of 3 numbers, from ``sender``, for each rank in turn."""
    return rank_data(sender, 3 * sum(alltoallv_counts(sender, p)), dtype).reshape(-1, 3)


def all_checks(c) -> dict:
    """Run every algorithm and collective; return results, traffic and errors."""
    from minidist import comm
    from minidist.comm.tags import Tag

    seen: dict = {"type": type(c).__name__, "allreduce": [], "bytes": {}}
    for algorithm in comm.ALGORITHMS:
        for n in lengths(c.size):
            for dtype in DTYPES:
                for op in OPS:
                    out = comm.allreduce(rank_data(c.rank, n, dtype), c, op, algorithm)
                    seen["allreduce"].append(out)
        c.stats.reset()
        comm.allreduce(np.ones(1000), c, "sum", algorithm, check=False)
        seen["bytes"][algorithm] = c.stats.bytes_sent
    x = rank_data(c.rank, 37, np.float64)
    seen["collectives"] = [
        comm.broadcast(x, c, root=c.size - 1), comm.broadcast(x, c, 0, "linear"),
        comm.reduce(x, c, root=c.size // 2, op="max"), comm.gather(x, c, root=0),
        comm.scatter(np.stack([x + k for k in range(c.size)]), c, root=0),
        comm.allgather(x, c), comm.reduce_scatter(x, c),
        comm.alltoall(np.stack([x * 10 + k for k in range(c.size)]), c)]
    # alltoallv: rank r sends (r + 2j) % (P + 1) rows to rank j (0, fewer than P, uneven)
    seen["alltoallv"] = [
        comm.alltoallv(alltoallv_rows(c.rank, c.size, dtype), alltoallv_counts(c.rank, c.size), c)
        for dtype in DTYPES]
    comm.barrier(c)
    try:  # a length mismatch must raise here, on every rank, not hang
        comm.allreduce(np.ones(5 + (c.rank == 0)), c, "sum", "ring")
        seen["mismatch"] = "no error"
    except ValueError as err:
        seen["mismatch"] = str(err)
    for name, call in (  # two different collectives, an algorithm's typo: errors, not hangs
            ("two collectives", lambda: comm.broadcast(np.ones(4), c) if c.rank == 0
             else comm.allreduce(np.ones(4), c)),
            ("typo", lambda: comm.allreduce(np.ones(4), c, algorithm="rign"
                                            if c.rank == c.size - 1 else "ring"))):
        try:
            call()
            seen[name] = "no error"
        except ValueError as err:
            seen[name] = str(err)
    if c.size > 1:  # a user's receive on the check's tag never takes a check's packet
        box = np.zeros(1)
        pending = c.irecv(box, 1, tag=Tag.AGREEMENT) if c.rank == 0 else None
        seen["tag"] = comm.broadcast(np.full(2, float(c.rank)), c, root=1)
        if c.rank == 1:
            c.send(np.array([42.0]), 0, tag=Tag.AGREEMENT)
        if pending is not None:
            pending.wait()
            seen["tag"] = (seen["tag"], box)
    return seen


@pytest.mark.timeout(90)
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_everything_under_mpi(p: int) -> None:
    from minidist import comm

    per_rank = md.launch(all_checks, world_size=p, backend="mpi", timeout=80)
    assert all(seen["type"] == "MPICommunicator" for seen in per_rank)
    expected = [np.stack([rank_data(r, n, dtype) for r in range(p)])
                for _ in comm.ALGORITHMS for n in lengths(p) for dtype in DTYPES]
    for seen in per_rank:
        results = iter(seen["allreduce"])
        for stacked in expected:
            for op, fn in zip(OPS, (np.sum, np.max, np.min, np.prod), strict=True):
                got = next(results)
                assert got.dtype == stacked.dtype
                assert np.array_equal(got, fn(stacked, axis=0).astype(stacked.dtype)), op
    # same bits everywhere, and the MPI transport counts what the model predicts
    for k in range(len(per_rank[0]["allreduce"])):
        assert len({seen["allreduce"][k].tobytes() for seen in per_rank}) == 1
    for algorithm in comm.ALGORITHMS:
        if algorithm == "mpi":
            continue  # MPI's own messages are not counted
        predicted = comm.cost.predict(algorithm, p, 8000, 8, comm.NetworkModel())
        assert [s["bytes"][algorithm] for s in per_rank] == predicted.bytes_sent, algorithm
    data = [rank_data(r, 37, np.float64) for r in range(p)]
    bounds = comm.chunk_bounds(37, p)
    for rank, seen in enumerate(per_rank):
        bcast, linear, reduced, gathered, scattered, everyone, chunk, swapped = seen["collectives"]
        assert np.array_equal(bcast, data[p - 1]) and np.array_equal(linear, data[0])
        if rank == p // 2:
            assert np.array_equal(reduced, np.max(data, axis=0))
        else:
            assert reduced is None
        if rank == 0:
            assert np.array_equal(gathered, np.stack(data))
        assert np.array_equal(scattered, data[0] + rank)
        assert np.array_equal(everyone, np.stack(data))
        assert np.array_equal(chunk, np.sum(data, axis=0)[slice(*bounds[rank])])
        assert np.array_equal(swapped, np.stack([d * 10 + rank for d in data]))
        if p > 1:
            assert "disagree on length" in seen["mismatch"]
            assert "disagree on collective" in seen["two collectives"]
            assert "disagree on algorithm" in seen["typo"]
            if rank == 0:
                broadcast_result, box = seen["tag"]
                assert box.tolist() == [42.0] and broadcast_result.tolist() == [1.0, 1.0]
        for dtype, (received, counts) in zip(DTYPES, seen["alltoallv"], strict=True):
            blocks = [np.split(alltoallv_rows(s, p, dtype),
                               np.cumsum(alltoallv_counts(s, p))[:-1])[rank] for s in range(p)]
            assert np.array_equal(received, np.concatenate(blocks)) and received.dtype == dtype
            assert counts.tolist() == [len(b) for b in blocks]
