"""The collectives against numpy on the in-process transport: world sizes 1-8, awkward shapes,
every dtype and op of the registry (``comm/ops.py``), blocks of any count for alltoallv (0, fewer
than P, uneven); their traffic as their docstrings state it; the same error on every rank for a
bad call."""

from __future__ import annotations

import numpy as np
import pytest

from minidist.comm import (
    LocalCluster,
    NetworkModel,
    allgather,
    allreduce,
    alltoall,
    alltoallv,
    barrier,
    broadcast,
    chunk_bounds,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)
from minidist.comm.ops import DTYPES, UFUNCS

OPS = {op: ufunc.reduce for op, ufunc in UFUNCS.items()}  # every op, as numpy computes it


def rank_data(rank: int, shape: tuple, dtype: type) -> np.ndarray:
    rng = np.random.default_rng([rank, *shape])
    return rng.integers(-3, 4, shape).astype(dtype)


def shapes(p: int) -> list[tuple]:
    return [(), (0,), (1,), (max(p - 1, 1),), (p + 1,), (37,), (3, 5)]


def v_counts(sender: int, p: int, case: int) -> list[int]:
    """How many rows ``sender`` sends each rank in alltoallv's case ``case``: 0 to P + 1,
    uneven, different for each sender; in case 0 nothing at all."""
    return [((sender + 1) * (j + 2) + case) % (p + 2) * (case > 0) for j in range(p)]


def v_blocks(sender: int, p: int, case: int, row: tuple, dtype: type) -> list[np.ndarray]:
    """The blocks ``sender`` sends each rank in alltoallv's case ``case``: rows of shape ``row``."""
    data = rank_data(sender, (sum(v_counts(sender, p, case)), *row), dtype)
    return np.split(data, np.cumsum(v_counts(sender, p, case))[:-1])


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
        for case, (row, dtype) in enumerate(cases):
            counts = v_counts(c.rank, p, case)
            out.extend(alltoallv(np.concatenate(v_blocks(c.rank, p, case, row, dtype)), counts, c))
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
        for case, (row, dtype) in enumerate(cases):
            received, recv_counts = next(got), next(got)
            blocks = [v_blocks(sender, p, case, row, dtype)[rank] for sender in range(p)]
            assert received.dtype == dtype and received.shape[1:] == row
            assert np.array_equal(received, np.concatenate(blocks)), (case, row, dtype)
            assert recv_counts.tolist() == [len(b) for b in blocks]


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_dissemination_barrier_waits_for_the_slowest(p: int) -> None:
    """Rank r computes r seconds (virtual); nobody leaves the barrier before P-1 seconds."""
    def body(c):
        c.compute(float(c.rank))
        barrier(c)
        return c.stats.clock

    clocks = LocalCluster(p, network=NetworkModel(1e-6, 1e-9, 0.0)).run(body)
    assert all(clock >= p - 1 for clock in clocks)


def traffic(p: int, call) -> tuple[list[int], list[int], int]:
    """Each rank's bytes sent and received, and the rounds of ``call(c)`` on P ranks."""
    cluster = LocalCluster(p, network=NetworkModel(alpha=1.0, beta=0.0, gamma=0.0))
    cluster.run(call)
    stats = cluster.stats
    return ([s.bytes_sent for s in stats], [s.bytes_recv for s in stats],
            max(s.rounds for s in stats))


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_traffic_is_the_cost_in_the_docstrings(p: int) -> None:
    """Bytes per rank and rounds, as each function's docstring states them (N = one rank's
    array of n float64; a row of scatter's and alltoall's (P, n) input is N bytes too)."""
    n, root, log = 4 * p, p // 2, (p - 1).bit_length()
    x, rows, big_n = np.ones(n), np.ones((p, n)), 8 * n
    root_only = [big_n * (r == root) for r in range(p)]  # N at the root, 0 elsewhere
    but_root = [big_n * (r != root) for r in range(p)]
    everyone = [(p - 1) * big_n] * p
    cases = {  # name: (call, bytes sent per rank (None: not stated), received, rounds)
        "linear broadcast": (lambda c: broadcast(x, c, root, "linear", check=False),
                             [(p - 1) * b for b in root_only], but_root, p - 1),
        "binomial broadcast": (lambda c: broadcast(x, c, root, check=False), None, but_root,
                               log),
        "reduce": (lambda c: reduce(x, c, root, check=False), but_root, None, log),
        "gather": (lambda c: gather(x, c, root, check=False), but_root,
                   [(p - 1) * b for b in root_only], p - 1),
        "scatter": (lambda c: scatter(rows, c, root, check=False),
                    [(p - 1) * b for b in root_only], but_root, p - 1),
        "allgather": (lambda c: allgather(x, c, check=False), everyone, everyone, p - 1),
        "reduce_scatter": (lambda c: reduce_scatter(x, c, check=False),
                           [b // p for b in everyone], [b // p for b in everyone], p - 1),
        "alltoall": (lambda c: alltoall(rows, c, check=False), everyone, everyone, p - 1),
        # rank r sends r + j rows of n float64 to rank j, and the counts: 8 bytes to each other
        "alltoallv": (lambda c: alltoallv(np.ones((sum(c.rank + j for j in range(p)), n)),
                                          [c.rank + j for j in range(p)], c, check=False),
                      [8 * (p - 1) + big_n * sum(r + j for j in range(p) if j != r)
                       for r in range(p)],
                      [8 * (p - 1) + big_n * sum(i + r for i in range(p) if i != r)
                       for r in range(p)], 2 * (p - 1)),
    }
    for name, (call, sent, received, rounds) in cases.items():
        got_sent, got_received, got_rounds = traffic(p, call)
        assert sent is None or got_sent == sent, name
        assert received is None or got_received == received, name
        assert sum(got_sent) == sum(got_received) and got_rounds == rounds, name
    assert traffic(p, lambda c: barrier(c, check=False)) == ([0] * p, [0] * p, log)


def _messages(p: int, call) -> list[str]:
    def body(c):
        try:
            call(c)
        except (ValueError, TypeError) as err:
            return str(err)
        return "no error"
    return LocalCluster(p).run(body, timeout=30)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("p", [2, 3])
def test_mismatches_raise_on_every_rank(p: int) -> None:
    last = p - 1
    calls = {
        "root": lambda c: broadcast(np.ones(4), c, root=c.rank == last),
        "schedule": lambda c: broadcast(np.ones(4), c, 0, "linear" if c.rank else "binomial"),
        "shape (": lambda c: broadcast(np.ones((2, 3) if c.rank == last else (3, 2)), c),
        "length": lambda c: reduce(np.ones(4 + (c.rank == last)), c),
        "dtype": lambda c: allgather(np.ones(4, np.int32 if c.rank == last else np.int64), c),
        "op": lambda c: reduce_scatter(np.ones(4), c, "min" if c.rank == last else "max"),
        "leading": lambda c: alltoall(np.ones((2 * p, 1) if c.rank == last else (p, 2)), c),
        "ndim": lambda c: alltoallv(np.ones((p, 2) if c.rank == last else (p,)), [1] * p, c),
        "row_items": lambda c: alltoallv(np.ones((p, 2 + (c.rank == last))), [1] * p, c),
        "row_shape": lambda c: alltoallv(np.ones((p, 2, 3) if c.rank == last else (p, 3, 2)),
                                         [1] * p, c),
        "valid_counts": lambda c: alltoallv(np.ones((p, 2)), [1] * p if c.rank else [p] * p, c),
    }
    for what, call in calls.items():
        messages = _messages(p, call)
        assert all(what in m for m in messages), (what, messages)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("p", [2, 3])
def test_two_different_collectives_called_at_once_raise_on_every_rank(p: int) -> None:
    """Every collective's check runs on ``c.private()``, so any two meet (allreduce's
    once ran there alone, and the barrier had none: a mismatch hung under MPI)."""
    first = {"broadcast": lambda c: broadcast(np.ones(4), c),
             "allreduce": lambda c: allreduce(np.ones(4), c),
             "barrier": barrier}
    second = {"allreduce": lambda c: allreduce(np.ones(4), c, algorithm="tree"),
              "reduce": lambda c: reduce(np.ones(4), c),
              "allgather": lambda c: allgather(np.ones(4), c)}
    for a, call_a in first.items():
        for b, call_b in second.items():
            if a != b:
                messages = _messages(p, lambda c, x=call_a, y=call_b: x(c) if c.rank else y(c))
                assert all("ranks disagree on collective" in m for m in messages), \
                    (a, b, messages)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("p", [2, 3])
def test_an_allreduce_mistake_on_one_rank_is_an_error_on_every_rank(p: int) -> None:
    """An unknown algorithm or an unfit ``out=`` on one rank is agreed on before anything
    moves; the rank at fault also says what it got wrong."""
    last = p - 1
    calls = {
        "algorithm": lambda c: allreduce(np.ones(4), c, algorithm="rign" if c.rank == last
                                         else "ring"),
        "valid_out": lambda c: allreduce(np.ones(4), c, out=np.empty(3) if c.rank == last
                                         else None),
        "valid_out ": lambda c: allreduce(np.ones(4), c, "sum", "tree",
                                          out=np.empty(4, np.float32) if c.rank == last
                                          else None),
        "valid_out  ": lambda c: allreduce(np.ones(4), c, "sum", "tree",
                                           out=_read_only(4) if c.rank == last else None),
    }
    for what, call in calls.items():
        messages = _messages(p, call)
        assert all(f"ranks disagree on {what.strip()}" in m for m in messages), (what, messages)
        said = "out is read-only" if what == "valid_out  " else \
            "out must be C-contiguous float64 of shape (4,)"
        assert f"here: {said}" in messages[last] or what == "algorithm", messages


def _read_only(n: int) -> np.ndarray:
    """A read-only out= passed the check, and the rank at fault failed alone in numpy
    (the others then hung under MPI, or returned a result with the tree)."""
    out = np.empty(n)
    out.flags.writeable = False
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("p", [2, 3])
def test_arrays_whose_layout_makes_the_result_agree_on_shape(p: int) -> None:
    """Same size, another shape on one rank: gather re-laid that rank's rows, allgather
    gave each rank a result of another shape, scatter and alltoall cut rows unlike the
    root's; broadcast alone refused it."""
    def shaped(c, rows=1):
        return np.zeros((rows, 2, 3) if c.rank == p - 1 else (rows, 3, 2))

    calls = {"gather": lambda c: gather(shaped(c), c),
             "allgather": lambda c: allgather(shaped(c), c),
             "scatter": lambda c: scatter(shaped(c, p), c),
             "alltoall": lambda c: alltoall(shaped(c, p), c)}
    for what, call in calls.items():
        messages = _messages(p, call)
        assert all(m.startswith(f"{what}: ranks disagree on shape") for m in messages), messages
        assert f"rank {p - 1} has ({1 if what.endswith('gather') else p}, 2, 3)" in messages[-1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("root", [1.5, np.float64(1.0), "1"])
def test_a_root_that_is_no_integer_is_refused_on_every_rank(root) -> None:
    for call in (lambda c: broadcast(np.ones(2), c, root=root),
                 lambda c: broadcast(np.ones(2), c, root=root, algorithm="linear"),
                 lambda c: gather(np.ones(2), c, root=root)):
        messages = _messages(3, call)
        assert all(f"root {root!r} is not a rank" in m for m in messages), messages


@pytest.mark.timeout(60)
@pytest.mark.parametrize("check", [True, False])
def test_bad_calls_raise_the_same_error_on_every_rank(check: bool) -> None:
    p = 3
    calls = {
        "root 3 is not a rank": lambda c: gather(np.ones(2), c, root=3, check=check),
        "unknown algorithm 'ring'": lambda c: broadcast(np.ones(2), c, 0, "ring", check=check),
        "unknown algorithm 'rign'": lambda c: allreduce(np.ones(2), c, algorithm="rign",
                                                        check=check),
        "out must be C-contiguous": lambda c: allreduce(np.ones(2), c, out=np.empty(3),
                                                        check=check),
        "dtype complex128 is not supported": lambda c: allgather(np.ones(2, complex), c,
                                                                 check=check),
        "op 'mean' is not supported": lambda c: reduce(np.ones(2), c, 0, "mean", check=check),
        "first axis of length P = 3": lambda c: scatter(np.ones((4, 2)), c, check=check),
        "counts must be P = 3 integers": lambda c: alltoallv(np.ones(3), [1, 2], c, check=check),
        "counts must not be negative": lambda c: alltoallv(np.ones(3), [2, 2, -1], c,
                                                           check=check),
        "add up to 2, but the array has 3 rows": lambda c: alltoallv(np.ones(3), [1, 1, 0], c,
                                                                     check=check),
        "needs a first axis": lambda c: alltoallv(np.float64(1), [0, 0, 0], c, check=check),
        "dtype complex64 is not supported": lambda c: alltoallv(np.ones(3, np.complex64),
                                                                [1] * 3, c, check=check),
    }
    for words, call in calls.items():
        messages = _messages(p, call)
        assert len(set(messages)) == 1 and words in messages[0], (words, messages)


def test_the_collectives_own_messages_never_meet_the_users() -> None:
    """A user's receive on tag 0, posted before a collective that also sends on tag 0 (on
    ``c.private()``), gets the user's message."""
    def body(c):
        mine = np.zeros(3)
        pending = c.irecv(mine, 0) if c.rank == 1 else None
        result = broadcast(np.full(3, 7.0), c, check=False)
        if c.rank == 0:
            c.send(np.full(3, 1.0), 1)
        else:
            pending.wait()
        return mine, result

    _, (mine, result) = LocalCluster(2).run(body)
    assert np.array_equal(mine, np.ones(3)) and np.array_equal(result, np.full(3, 7.0))


def test_inputs_that_are_not_contiguous_or_not_arrays() -> None:
    def body(c):
        wide = np.arange(12.0).reshape(3, 4) + c.rank
        return (allgather(wide[:, ::2], c), reduce_scatter(wide.T, c),
                broadcast([1.0, 2.0], c), wide)

    results = LocalCluster(2).run(body)
    for rank, (gathered, chunk, listed, wide) in enumerate(results):
        assert np.array_equal(gathered, np.stack([np.arange(12.0).reshape(3, 4)[:, ::2] + r
                                                  for r in range(2)]))
        total = (2 * np.arange(12.0).reshape(3, 4) + 1).T.reshape(-1)
        lo, hi = chunk_bounds(12, 2)[rank]
        assert np.array_equal(chunk, total[lo:hi]) and np.array_equal(listed, [1.0, 2.0])
        assert np.array_equal(wide, np.arange(12.0).reshape(3, 4) + rank)  # unchanged


@pytest.mark.parametrize("n", [0, 1, 5, 8, 13])
@pytest.mark.parametrize("p", [1, 3, 8])
def test_chunk_bounds(n: int, p: int) -> None:
    bounds = chunk_bounds(n, p)
    sizes = [hi - lo for lo, hi in bounds]
    assert bounds[0][0] == 0 and bounds[-1][1] == n and len(bounds) == p
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
