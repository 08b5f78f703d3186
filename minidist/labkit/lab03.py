"""Checks for Lab 3 (allreduce algorithms): each claim of a task's text, in a sentence.

An answer is a function ``fn(x, c, op="sum") -> x`` that reduces this rank's
1-D vector ``x`` over all ranks *in place* and returns it, exactly as the
library's algorithms do (``minidist/comm/collectives/``).
:func:`check_allreduce` runs it on P in-process ranks, each with its own
random vector, with every collective of the library blocked
(``labkit/ranks.py``), and checks, in this order:

1. the result: every rank returns ``x`` itself (dtype first: a new float64
   array for int32 input is named as such), and ``x`` holds ``op`` over the
   P inputs;
2. the traffic the text states, per rank, for every n (0 and n < P
   included: an empty chunk is still a message): messages and bytes sent
   and received, from the transport's counters; a ring sends only to its
   right neighbour;
3. the reductions: the bytes each rank reduces through ``c.combine`` (the
   clock charges γ for those, and only those);
4. the schedule: the rounds and the modelled time against the text's
   schedule (``comm.cost.schedule_cost``), then, where the text prescribes
   an order, whom each rank sends to and receives from, in order;
5. the same bits on every rank (each element reduced once, then copied).

A "ring" that passes the whole vector around gets the right values and
fails at 2; one that calls the library fails at once (it is blocked).
:func:`check_ring_on_mpi` runs a ring on real MPI processes (after a dry run
on in-process ranks, so that a broken ring fails in a sentence, not in MPI's
abort messages, and whose bytes are counted here) and checks the values and
the bytes the MPI transport counted.

When the lab is graded the student's functions live in the kernel and the
ranks here: a rank's communicator is lent to the student's code
(``relay.py``), so traffic, reductions, rounds, the modelled time and the
order of calls are the grader's. The MPI run of Task 6 starts in the kernel
(its counters are the kernel's report); its dry run's bytes are the grader's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm import CommStats, NetworkModel, cost
from minidist.comm.ops import UFUNCS
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.lab03_mpi import ring_on_mpi
from minidist.labkit.ranks import (
    LIBRARY_COLLECTIVES,
    MessageLog,
    expect_counts,
    rank_inputs,
    run_ranks,
)
from minidist.util import chunk_bounds

ALGORITHMS = ("naive", "ps", "ring", "tree")
TRAFFIC = {
    "naive": "rank 0 receives P-1 vectors and sends the result back P-1 times; every other "
             "rank sends its vector and receives the result",
    "ps": "rank k sends and receives 2(P-1) messages: N - n_k bytes of other shards, then "
          "(P-1)·n_k of its reduced shard",
    "ring": "a ring sends 2(P-1) messages per rank, one chunk per step: every chunk but "
            "r+1, then every chunk but r+2, even an empty one",
    "tree": "a tree sends one message per edge and direction: N bytes to the parent and to "
            "each child",
}
REDUCED = {
    "naive": "rank 0 reduces the P-1 other vectors, (P-1)·N bytes; the others reduce nothing",
    "ps": "rank k reduces the P-1 other copies of its shard, (P-1)·n_k bytes",
    "ring": "rank r reduces every chunk but chunk r, once each",
    "tree": "a rank reduces one vector per child",
}
ORDER = {
    "naive": "rank 0 receives from ranks 1, 2, ..., P-1, then sends to them in the same "
             "order; every other rank sends to rank 0, then receives from it",
    "ps": "rank r sends its shards to r+1, r+2, ..., r-1 (right neighbour first), receives "
          "from r-1, r-2, ..., r+1, then sends and receives the reduced shards in the same "
          "orders",
    "ring": "in each step rank r sends to its right neighbour and receives from its left",
    "tree": "rank r receives from child 2r+1, then 2r+2, sends to its parent (r-1)//2, "
            "receives from it, then sends to 2r+1, then 2r+2 (children < P)",
}


def text_calls(algorithm: str, p: int, r: int) -> list[tuple[str, int]]:
    """The sends and receives rank ``r`` posts, in order, in the text's schedule."""
    if algorithm == "naive":
        others = range(1, p)
        return ([("recv", k) for k in others] + [("send", k) for k in others] if r == 0
                else [("send", 0), ("recv", 0)])
    if algorithm == "ps":
        peers = [(r + k) % p for k in range(1, p)]
        phase = [("send", k) for k in peers] + [("recv", k) for k in reversed(peers)]
        return phase + phase
    if algorithm == "ring":
        return [("send", (r + 1) % p), ("recv", (r - 1) % p)] * 2 * (p - 1)
    children = [k for k in (2 * r + 1, 2 * r + 2) if k < p]
    parent = [("send", (r - 1) // 2), ("recv", (r - 1) // 2)] if r > 0 else []
    return [("recv", k) for k in children] + parent + [("send", k) for k in children]


def check_allreduce(algorithm: str, fn: Callable[..., np.ndarray], world_size: int, n: int,
                    dtype: str = "float64", op: str = "sum", seed: int = 0,
                    block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Run ``fn(x, c, op)`` on ``world_size`` ranks with ``n`` elements each; checks 1-5."""
    __tracebackhide__ = True
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; use one of {ALGORITHMS}")
    p = world_size
    what = f"{algorithm} allreduce, P = {p}, {n} x {dtype}, op {op!r}"
    data = rank_inputs(p, n, dtype, seed)
    inputs = [row.copy() for row in data]
    calls: list[list[tuple[str, int]]] = [[] for _ in range(p)]
    reduced = [[0] for _ in range(p)]
    results, stats = run_ranks(lambda c: fn(inputs[c.rank], MessageLog(
        c, calls[c.rank], reduced[c.rank]), op), p, what, block)
    expect_result(what, results, inputs, data, op)
    model = cost.schedule_cost(algorithm, p, data[0].nbytes, data.itemsize, NetworkModel())
    expect_traffic(algorithm, what, stats, model)
    expect_reductions(algorithm, what, [count for count, in reduced], n, data.itemsize)
    expect_schedule(algorithm, what, stats, model, calls)
    for rank, got in enumerate(inputs[1:], start=1):
        expect(got.tobytes() == inputs[0].tobytes(), f"{what}: ranks 0 and {rank} hold "
               "different bits; reduce each element once and copy the result, so that every "
               "rank holds the same values")


def expect_reductions(algorithm: str, what: str, reduced: list[int], n: int,
                      itemsize: int) -> None:
    """The bytes each rank reduced through ``c.combine``: the text's schedule's."""
    __tracebackhide__ = True
    p, nbytes = len(reduced), n * itemsize
    parts = [(hi - lo) * itemsize for lo, hi in chunk_bounds(n, p)]
    expected = {"naive": [(p - 1) * nbytes] + [0] * (p - 1),
                "ps": [(p - 1) * part for part in parts],
                "ring": [nbytes - part if p > 1 else 0 for part in parts],
                "tree": [len([k for k in (2 * r + 1, 2 * r + 2) if k < p]) * nbytes
                         for r in range(p)]}[algorithm]
    for rank, (got, want) in enumerate(zip(reduced, expected, strict=True)):
        expect(got == want, f"{what}: rank {rank} reduced {got} bytes through c.combine, "
               f"expected {want} ({REDUCED[algorithm]}); reduce with c.combine(op, acc, "
               "incoming), which the clock charges γ per byte")


def expect_result(what: str, results: list[Any], inputs: list[np.ndarray], data: np.ndarray,
                  op: str) -> None:
    """Each rank returned its ``x``, of the input's dtype, holding ``op`` over the inputs."""
    __tracebackhide__ = True
    for rank, (got, x) in enumerate(zip(results, inputs, strict=True)):
        kind = f"{got.dtype} values" if isinstance(got, np.ndarray) else type(got).__name__
        expect(isinstance(got, np.ndarray) and got.dtype == data.dtype, f"{what}: rank {rank} "
               f"returned {kind} for {data.dtype} input; the result keeps x's dtype")
        expect(got is x, f"{what}: rank {rank} returned a new array; reduce in place, into x "
               "itself, and return x (as MPI_IN_PLACE)")
    expected = UFUNCS[op].reduce(data, axis=0)
    exact = data.dtype.kind != "f"
    rtol = 0 if exact else 1e-10 if data.dtype == np.float64 else 1e-5
    for rank, x in enumerate(inputs):
        expect_close(f"{what}: rank {rank}'s x afterwards", x, expected, rtol=rtol,
                     atol=0 if exact else rtol)


def expect_traffic(algorithm: str, what: str, stats: list[CommStats], model: cost.Cost) -> None:
    """Messages and bytes, sent and received, per rank: the text's schedule's."""
    __tracebackhide__ = True
    if algorithm == "ring":
        total, expected = sum(s.bytes_sent for s in stats), sum(model.bytes_sent)
        expect(total == expected, f"{what}: {total} bytes sent in all, a ring sends 2(P-1)N = "
               f"{expected} (each chunk crosses P-1 links twice)")
    for counter in ("messages_sent", "messages_recv", "bytes_sent", "bytes_recv"):
        expect_counts(what, stats, counter, getattr(model, counter), TRAFFIC[algorithm])


def expect_schedule(algorithm: str, what: str, stats: list[CommStats], model: cost.Cost,
                    calls: list[list[tuple[str, int]]]) -> None:
    """Rounds and modelled time as the text's schedule, then its order of sends and receives."""
    __tracebackhide__ = True
    rounds, clock = max(s.rounds for s in stats), max(s.clock for s in stats)
    expect(rounds == model.rounds and abs(clock - model.time) <= 1e-9 * model.time,
           f"{what}: took {rounds} rounds and {clock * 1e6:.2f} µs on the modelled clock; the "
           f"text's schedule takes {model.rounds} rounds and {model.time * 1e6:.2f} µs "
           f"({ORDER[algorithm]})")
    p = len(calls)
    for rank, posted in enumerate(calls):
        wanted = text_calls(algorithm, p, rank)
        if algorithm == "ring":  # isend + recv or irecv + isend: the same step
            posted, wanted = sorted(set(posted)), sorted(set(wanted))
        expect(posted == wanted, f"{what}: rank {rank} posted {said(posted)}; {ORDER[algorithm]}"
               f", so it should post {said(wanted)}")


def said(posted: list[tuple[str, int]]) -> str:
    """Posted calls in words: "send to rank 1, then recv from rank 2"."""
    return ", then ".join(f"{kind} {'to' if kind == 'send' else 'from'} rank {peer}"
                          for kind, peer in posted) or "nothing"


def check_ring_on_mpi(ring: Callable[..., np.ndarray], world_size: int, n: int,
                      dtype: str = "float64", seed: int = 0,
                      block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Run ``ring`` on ``world_size`` MPI processes: in place, the values, 2(P-1)N bytes.

    A dry run on in-process ranks comes first, so that a ring that fails says why in
    one sentence before MPI starts. When the lab is graded the MPI processes are the
    grader's, driven by the student's ring in the kernel, and their counters are read
    there (``lab03_mpi.py``)."""
    __tracebackhide__ = True
    what = f"ring allreduce on MPI, P = {world_size}, {n} x {dtype}"
    data = rank_inputs(world_size, n, dtype, seed)
    expected = 2 * (world_size - 1) * data[0].nbytes
    try:  # a dry run first: a ring that raises or hangs fails here, in one sentence
        _, stats = run_ranks(lambda c: ring(data[c.rank].copy(), c), world_size, what, block)
    except CheckFailed as failure:
        raise CheckFailed(f"your ring_allreduce of Task 3 fails on in-process ranks, so it "
                          f"was not started on MPI: {failure}") from None
    total = sum(s.bytes_sent for s in stats)
    expect(total == expected, f"{what}: on in-process ranks first, {total} bytes were sent in "
           f"all; a ring sends 2(P-1)N = {expected}, so it was not started on MPI")
    runs = ring_on_mpi(ring, data, block, what)
    for rank, (in_place, _, _) in enumerate(runs):
        expect(in_place, f"{what}: rank {rank} returned a new array; reduce in place, into x "
               "itself, and return x")
    expect_result(what, [x for _, x, _ in runs], [x for _, x, _ in runs], data, "sum")
    total = sum(sent for _, _, sent in runs)
    expect(total == expected, f"{what}: {total} bytes sent through the communicator in all, "
           f"a ring sends 2(P-1)N = {expected}")


def check_cost_model(bytes_sent_per_rank: Callable[[str, int, int], float],
                     modelled_time: Callable[[str, int, int, float, float], float],
                     cases: list[tuple[str, int, int, float, float]]) -> None:
    """Both functions against ``comm.cost.predict`` on each (algorithm, P, N, alpha, beta).

    N is a multiple of P (bytes, cut into whole bytes); gamma is 0. The
    expected figures are computed first, then the cost model is blocked (its
    functions marked ``@lab_answer("lab03_cost")``).
    """
    __tracebackhide__ = True
    expected = [cost.predict(a, p, nbytes, itemsize=1, network=NetworkModel(alpha, beta, 0.0))
                for a, p, nbytes, alpha, beta in cases]
    with blocked("lab03_cost"):
        for (a, p, nbytes, alpha, beta), model in zip(cases, expected, strict=True):
            what = f"{a} at P = {p}, N = {nbytes} bytes"
            expect_close(f"bytes sent by the busiest rank, {what}",
                         float(bytes_sent_per_rank(a, p, nbytes)), model.max_bytes_sent,
                         rtol=1e-9, atol=0)
            expect_close(f"modelled time, {what}, alpha = {alpha:g} s, beta = {beta:g} s/B",
                         float(modelled_time(a, p, nbytes, alpha, beta)), model.time,
                         rtol=1e-9, atol=0)
