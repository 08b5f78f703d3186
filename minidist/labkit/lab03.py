"""Checks for Lab 3 (allreduce algorithms): values against numpy, traffic against formulas.

An allreduce answer is a function ``fn(arr, c) -> array`` (sum over the ranks).
:func:`check_allreduce` runs it on P in-process ranks, each with its own
random vector, with every collective of the library blocked, and checks:

1. values: every rank returns the numpy sum of the P inputs, and all ranks
   hold the same bits (each element reduced once, then copied);
2. traffic, when the vector has at least P elements, from the transport's
   counters (N = bytes of the vector, n_k = bytes of shard k,
   ``chunk_bounds(n, P)[k]``):

   ========= ===================================================================
   naive     rank 0 sends and receives P-1 messages, (P-1)N bytes; the others 1,
             N; 2(P-1) rounds
   ps        rank k sends and receives 2(P-1) messages, N - n_k + (P-1) n_k bytes
   ring      every rank sends only to its right neighbour, 2(P-1) messages of
             at most ceil(n/P) elements; 2(P-1)N bytes in all (every chunk
             crosses P-1 links twice); 2(P-1) rounds (one latency per step)
   tree      2(P-1) messages of N bytes in all (one per tree edge and direction),
             no rank receives more than 3; at most 4 floor(log2 P) rounds
   ========= ===================================================================

A "ring" that passes the whole vector around moves P times too many bytes
and fails; so does any answer that calls the library (it is blocked).
:func:`check_ring_on_mpi` runs a ring on real MPI processes and checks the
same values and bytes from the MPI transport's counters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm.collectives.ring import chunk_bounds
from minidist.comm.errors import RankError
from minidist.comm.transport.stats import CommStats
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import expect, expect_close
from minidist.labkit.ranks import (
    LIBRARY_COLLECTIVES,
    as_one_sentence,
    expect_counts,
    expect_rounds,
    rank_inputs,
    run_ranks,
)

ALGORITHMS = ("naive", "ps", "ring", "tree")


def expect_values(what: str, results: list[Any], data: np.ndarray) -> None:
    """Every rank's result is the sum of ``data``'s rows, with the same bits everywhere."""
    __tracebackhide__ = True
    expected = data.sum(axis=0)
    for rank, got in enumerate(results):
        expect_close(f"{what}: rank {rank}'s result", got, expected, rtol=1e-10, atol=1e-12)
    for rank, got in enumerate(results[1:], start=1):
        same = np.asarray(got).tobytes() == np.asarray(results[0]).tobytes()
        expect(same, f"{what}: ranks 0 and {rank} hold different bits; reduce each element "
               "once and copy the result, so that every rank holds the same values")


def expect_traffic(algorithm: str, what: str, stats: list[CommStats], n: int,
                   itemsize: int) -> None:
    """The traffic of ``algorithm`` on ``n`` elements (see the module docstring)."""
    __tracebackhide__ = True
    p, nbytes = len(stats), n * itemsize
    if algorithm == "naive":
        messages = [p - 1] + [1] * (p - 1)
        for counter in ("messages_sent", "messages_recv"):
            expect_counts(what, stats, counter, messages)
        for counter in ("bytes_sent", "bytes_recv"):
            expect_counts(what, stats, counter, [k * nbytes for k in messages])
        expect_rounds(what, stats, 2 * (p - 1), "single master (2(P-1))")
    elif algorithm == "ps":
        shard = [(hi - lo) * itemsize for lo, hi in chunk_bounds(n, p)]
        for counter in ("messages_sent", "messages_recv"):
            expect_counts(what, stats, counter, [2 * (p - 1)] * p)
        for counter in ("bytes_sent", "bytes_recv"):
            expect_counts(what, stats, counter, [nbytes + (p - 2) * s for s in shard])
    elif algorithm == "ring":
        for counter in ("messages_sent", "messages_recv"):
            expect_counts(what, stats, counter, [2 * (p - 1)] * p)
        total = sum(s.bytes_sent for s in stats)
        expect(total == 2 * (p - 1) * nbytes, f"{what}: {total} bytes sent in all, a ring "
               f"sends 2(P-1)N = {2 * (p - 1) * nbytes} (each chunk crosses P-1 links twice)")
        most = 2 * (p - 1) * -(-n // p) * itemsize
        busiest = max(s.bytes_sent for s in stats)
        expect(busiest <= most, f"{what}: a rank sent {busiest} bytes, a ring sends at most "
               f"2(P-1) chunks of ceil(n/P) elements = {most}")
        expect_rounds(what, stats, 2 * (p - 1), "ring (2(P-1): one latency per step)")
    elif algorithm == "tree":
        total = sum(s.messages_sent for s in stats)
        expect(total == 2 * (p - 1), f"{what}: {total} messages in all, a tree sends "
               f"2(P-1) = {2 * (p - 1)} (one per edge, up and down)")
        expect_counts(what, stats, "bytes_sent", [s.messages_sent * nbytes for s in stats])
        most = max(s.messages_recv for s in stats)
        expect(most <= 3, f"{what}: a rank received {most} messages; in a binary tree a rank "
               "receives at most 3 (two children going up, its parent going down)")
        rounds, limit = max(s.rounds for s in stats), 4 * int(math.log2(p))
        expect(rounds <= limit, f"{what}: took {rounds} rounds, a balanced binary tree "
               f"takes at most 4 floor(log2 P) = {limit}")
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}; use one of {ALGORITHMS}")


class SendLog:
    """Rank ``c`` as the answer sees it, noting every rank it sends to in ``destinations``.

    The counters say how much moved, not where: this says where (a ring sends
    only to the right neighbour; a sharded parameter server to every rank).
    """

    def __init__(self, c: Any, destinations: set[int]) -> None:
        self._c, self.destinations = c, destinations
        self.rank, self.size = c.rank, c.size

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        self.destinations.add(dest)
        self._c.send(buf, dest, tag)

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Any:
        self.destinations.add(dest)
        return self._c.isend(buf, dest, tag)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 sendtag: int = 0, recvtag: int = 0) -> np.ndarray:
        self.destinations.add(dest)
        return self._c.sendrecv(sendbuf, dest, recvbuf, source, sendtag, recvtag)


def check_allreduce(algorithm: str, fn: Callable[[np.ndarray, Any], np.ndarray],
                    world_size: int, n: int, dtype: str = "float64", seed: int = 0,
                    block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Run ``fn`` on ``world_size`` ranks with ``n`` elements each; values, then traffic."""
    __tracebackhide__ = True
    what = f"{algorithm} allreduce, P = {world_size}, {n} x {dtype}"
    data = rank_inputs(world_size, n, dtype, seed)
    destinations: list[set[int]] = [set() for _ in range(world_size)]
    results, stats = run_ranks(lambda c: fn(data[c.rank].copy(),
                                            SendLog(c, destinations[c.rank])),
                               world_size, what, block)
    expect_values(what, results, data)
    if world_size > 1 and n >= world_size:
        expect_traffic(algorithm, what, stats, n, data.itemsize)
    if algorithm == "ring" and world_size > 1:
        for rank, sent_to in enumerate(destinations):
            right = (rank + 1) % world_size
            expect(sent_to <= {right}, f"{what}: rank {rank} sent to ranks {sorted(sent_to)}; "
                   f"in a ring it sends only to its right neighbour, rank {right}")


def check_ring_on_mpi(ring: Callable[[np.ndarray, Any], np.ndarray], world_size: int, n: int,
                      dtype: str = "float64", seed: int = 0,
                      block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Run ``ring`` on ``world_size`` MPI processes: values, and 2(P-1)N bytes in all."""
    __tracebackhide__ = True
    import minidist as md

    what = f"ring allreduce on MPI, P = {world_size}, {n} x {dtype}"
    data = rank_inputs(world_size, n, dtype, seed)
    try:
        runs = md.launch(allreduce_on_rank, world_size=world_size, args=(ring, data, block),
                         backend="mpi", timeout=60)
    except RankError as error:
        raise as_one_sentence(error, what) from None
    expect_values(what, [result for result, _ in runs], data)
    total = sum(stats.bytes_sent for _, stats in runs)
    expected = 2 * (world_size - 1) * data[0].nbytes
    expect(total == expected, f"{what}: {total} bytes sent through the communicator in all, "
           f"a ring sends 2(P-1)N = {expected}")


def allreduce_on_rank(c: Any, fn: Callable[[np.ndarray, Any], np.ndarray],
                      data: np.ndarray, block: tuple[str, ...]) -> tuple[np.ndarray, CommStats]:
    """On each MPI rank: ``fn`` on this rank's row, with ``block`` blocked."""
    with blocked(*block):
        result = fn(data[c.rank].copy(), c)
    return np.asarray(result), c.stats.copy()


def check_cost_model(bytes_sent_per_rank: Callable[[str, int, int], float],
                     modelled_time: Callable[[str, int, int, float, float], float],
                     cases: list[tuple[str, int, int, float, float]]) -> None:
    """Both functions against ``comm.cost.predict`` on each (algorithm, P, N, alpha, beta).

    N is a multiple of P (bytes, cut into whole bytes); gamma is 0. The
    expected figures are computed first, then the cost model is blocked.
    """
    __tracebackhide__ = True
    from minidist.comm import NetworkModel, cost

    expected = [cost.predict(a, p, nbytes, itemsize=1, network=NetworkModel(alpha, beta, 0.0))
                for a, p, nbytes, alpha, beta in cases]
    with blocked("minidist.comm.cost.predict", "minidist.comm.cost.naive_cost",
                 "minidist.comm.cost.ps_cost", "minidist.comm.cost.ring_cost"):
        for (a, p, nbytes, alpha, beta), model in zip(cases, expected, strict=True):
            what = f"{a} at P = {p}, N = {nbytes} bytes"
            expect_close(f"bytes sent by the busiest rank, {what}",
                         float(bytes_sent_per_rank(a, p, nbytes)), model.max_bytes_sent,
                         rtol=1e-9, atol=0)
            expect_close(f"modelled time, {what}, alpha = {alpha:g} s, beta = {beta:g} s/B",
                         float(modelled_time(a, p, nbytes, alpha, beta)), model.time,
                         rtol=1e-9, atol=0)
