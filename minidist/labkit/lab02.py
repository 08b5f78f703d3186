"""Checks for Lab 2 (processes and messages): run a student's function on P ranks, count.

Every check runs the function under test on in-process ranks
(:class:`~minidist.comm.LocalCluster`, ranks as threads), each rank with its
own input, then compares two things with what the algorithm must give:

1. the values: against numpy on the gathered inputs (a single-process
   reference, computed by the check, never by the code under test);
2. the traffic: the transport's per-rank counters (messages, bytes,
   ``rounds`` = message latencies on the critical path) against the
   algorithm's formula. A "binomial" broadcast that is really linear moves
   the right bytes but takes P-1 rounds instead of ceil(log2 P): it fails.

While the function runs, every collective of the library is **blocked**
(:data:`LIBRARY_COLLECTIVES`): the answer must be written with ``send`` and
``recv``. A rank that raises, or ranks that deadlock, fail the check with one
sentence naming the rank (the transport detects deadlocks instead of hanging).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm import LocalCluster, NetworkModel
from minidist.comm.errors import CommError, RankError
from minidist.comm.transport.stats import LocalStats
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect, expect_close

RUN_TIMEOUT = 30.0  # seconds of wall clock for one multi-rank run

LIBRARY_COLLECTIVES = (
    "minidist.comm.collectives.allreduce.allreduce",
    "minidist.comm.collectives.allreduce.mpi_allreduce",
    "minidist.comm.collectives.central.naive_allreduce",
    "minidist.comm.collectives.central.ps_allreduce",
    "minidist.comm.collectives.ring.ring_allreduce",
    "minidist.comm.collectives.ring.ring_reduce_scatter",
    "minidist.comm.collectives.ring.ring_allgather",
    "minidist.comm.collectives.tree.trees_allreduce",
    "minidist.comm.collectives.tree.reduce_segment",
    "minidist.comm.collectives.tree.broadcast_segment",
    "minidist.comm.collectives.doubling.recursive_doubling_allreduce",
    "minidist.comm.collectives.agreement.checked_small_allreduce",
    "minidist.comm.collectives.broadcast",
    "minidist.comm.collectives.reduce",
    "minidist.comm.collectives.gather",
    "minidist.comm.collectives.scatter",
    "minidist.comm.collectives.allgather",
    "minidist.comm.collectives.reduce_scatter",
    "minidist.comm.collectives.alltoall",
    "minidist.comm.collectives.barrier",
)


def rank_inputs(world_size: int, n: int, dtype: str = "float64", seed: int = 0) -> np.ndarray:
    """One input per rank, shape ``(P, n)``: random floats, or integers in [-50, 50)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((world_size, n)).astype(dtype)
    return rng.integers(-50, 50, (world_size, n)).astype(dtype)


def as_one_sentence(error: RankError, what: str) -> BaseException:
    """What a failed run should tell the student: the rank's own error, in one sentence.

    ``NotImplementedError`` (not done yet, or a blocked library function) and
    failed checks pass through unchanged, so ``task`` words them as usual.
    """
    cause = error.__cause__
    if isinstance(cause, NotImplementedError | CheckFailed):
        return cause
    if isinstance(cause, CommError):
        return CheckFailed(f"{what}: {cause}")
    return CheckFailed(f"{what}: rank {error.rank} raised {error.summary}")


def run_ranks(body: Callable[[Any], Any], world_size: int, what: str,
              block: tuple[str, ...] = LIBRARY_COLLECTIVES,
              **options: Any) -> tuple[list[Any], list[LocalStats]]:
    """Run ``body(c)`` on ``world_size`` in-process ranks with ``block`` blocked (the
    library's collectives); returns the results and each rank's counters.
    ``options``: LocalCluster's. The test suite passes ``block=()`` to check the library."""
    __tracebackhide__ = True
    options.setdefault("network", NetworkModel())
    cluster = LocalCluster(world_size, **options)
    try:
        with blocked(*block):
            results = cluster.run(body, timeout=RUN_TIMEOUT)
    except RankError as error:
        raise as_one_sentence(error, what) from None
    except TimeoutError:
        raise CheckFailed(f"{what}: did not finish within {RUN_TIMEOUT:g} s") from None
    return results, cluster.stats


def expect_counts(what: str, stats: list[LocalStats], counter: str,
                  expected: list[int]) -> None:
    """Each rank's ``counter`` (e.g. ``messages_sent``) must equal ``expected[rank]``."""
    __tracebackhide__ = True
    got = [getattr(s, counter) for s in stats]
    for rank, (g, e) in enumerate(zip(got, expected, strict=True)):
        expect(g == e, f"{what}: rank {rank} has {counter} = {g}, expected {e} "
               f"(all ranks: {got})")


def expect_rounds(what: str, stats: list[LocalStats], expected: int, name: str) -> None:
    """The run's rounds (the largest over the ranks) must be ``expected``."""
    __tracebackhide__ = True
    rounds = max(s.rounds for s in stats)
    expect(rounds == expected, f"{what}: took {rounds} rounds of message latency, "
           f"a {name} takes {expected}")


def log2_rounds(world_size: int) -> int:
    """ceil(log2 P): the rounds of a binomial tree over P ranks."""
    return math.ceil(math.log2(world_size)) if world_size > 1 else 0


# --- Task 1: a ring exchange that cannot deadlock ------------------------------------------
def check_ring_shift(ring_shift: Callable[[np.ndarray, Any], np.ndarray], world_size: int,
                     n: int, dtype: str = "float64", seed: int = 0,
                     block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Rank r must return rank r-1's array; every send waits for its receive (rendezvous)."""
    __tracebackhide__ = True
    what = f"ring_shift, P = {world_size}, {n} x {dtype}, rendezvous sends"
    data = rank_inputs(world_size, n, dtype, seed)
    results, stats = run_ranks(lambda c: ring_shift(data[c.rank].copy(), c), world_size, what,
                               block, eager_limit=0)
    for rank, got in enumerate(results):
        expect_close(f"{what}: rank {rank} (should hold rank {(rank - 1) % world_size}'s array)",
                     got, data[(rank - 1) % world_size], rtol=0, atol=0)
    expect_counts(what, stats, "messages_sent", [1] * world_size)
    expect_counts(what, stats, "bytes_sent", [data[0].nbytes] * world_size)


# --- Tasks 2-3: broadcast, linear and binomial ---------------------------------------------
def check_broadcast(broadcast: Callable[[np.ndarray, Any, int], np.ndarray], world_size: int,
                    n: int, root: int, schedule: str, dtype: str = "float64",
                    seed: int = 0, block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Every rank must return the root's array; traffic as a linear or binomial schedule.

    Both: each rank but the root receives exactly one message of N bytes; the
    root receives none. Linear: the root sends all P-1 messages, P-1 rounds.
    Binomial: P-1 messages in all, ceil(log2 P) rounds.
    """
    __tracebackhide__ = True
    what = f"{schedule} broadcast, P = {world_size}, root {root}, {n} x {dtype}"
    data = rank_inputs(world_size, n, dtype, seed)
    results, stats = run_ranks(lambda c: broadcast(data[c.rank].copy(), c, root), world_size,
                               what, block)
    for rank, got in enumerate(results):
        expect_close(f"{what}: rank {rank}'s result", got, data[root], rtol=0, atol=0)
    others = [0 if r == root else 1 for r in range(world_size)]
    expect_counts(what, stats, "messages_recv", others)
    expect_counts(what, stats, "bytes_recv", [k * data[0].nbytes for k in others])
    sent = sum(s.messages_sent for s in stats)
    expect(sent == world_size - 1, f"{what}: {sent} messages sent in all, expected P-1 = "
           f"{world_size - 1}")
    if schedule == "linear":
        expect_counts(what, stats, "messages_sent",
                      [world_size - 1 if r == root else 0 for r in range(world_size)])
        expect_rounds(what, stats, world_size - 1, "linear broadcast (P-1)")
    else:
        expect_rounds(what, stats, log2_rounds(world_size), "binomial tree (ceil(log2 P))")


# --- Task 4: reduce along a binomial tree --------------------------------------------------
def check_reduce(reduce: Callable[[np.ndarray, Any, int], np.ndarray | None], world_size: int,
                 n: int, root: int, dtype: str = "float64", seed: int = 0,
                 block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """The root must return the sum of all inputs, the others ``None``; each non-root rank
    sends one message of N bytes; ceil(log2 P) rounds."""
    __tracebackhide__ = True
    what = f"binomial reduce, P = {world_size}, root {root}, {n} x {dtype}"
    data = rank_inputs(world_size, n, dtype, seed)
    results, stats = run_ranks(lambda c: reduce(data[c.rank].copy(), c, root), world_size, what,
                               block)
    expect_close(f"{what}: the root's result", results[root], data.sum(axis=0), rtol=1e-12,
                 atol=1e-12)
    for rank, got in enumerate(results):
        expect(rank == root or got is None, f"{what}: rank {rank} is not the root and should "
               f"return None, got {type(got).__name__}")
    others = [0 if r == root else 1 for r in range(world_size)]
    expect_counts(what, stats, "messages_sent", others)
    expect_counts(what, stats, "bytes_sent", [k * data[0].nbytes for k in others])
    expect_rounds(what, stats, log2_rounds(world_size), "binomial tree (ceil(log2 P))")


# --- Tasks 5-6: measuring alpha and beta ---------------------------------------------------
def check_fit_line(fit_line: Callable[[Any, Any], tuple[float, float]], sizes: np.ndarray,
                   times: np.ndarray, what: str) -> None:
    """``fit_line(sizes, times)`` must be the least-squares (alpha, beta) of t = alpha + beta n."""
    __tracebackhide__ = True
    design = np.stack([np.ones(len(sizes)), np.asarray(sizes, dtype=np.float64)], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, np.asarray(times, dtype=np.float64), rcond=None)
    got = fit_line(sizes, times)
    expect(len(got) == 2, f"{what}: return (alpha, beta), got {len(got)} values")
    expect_close(f"{what}: alpha", float(got[0]), alpha, rtol=1e-6, atol=1e-15)
    expect_close(f"{what}: beta", float(got[1]), beta, rtol=1e-6, atol=1e-20)


def check_ping_pong_traffic(ping_pong: Callable[[Any, int, int], float], nbytes: int,
                            repeats: int, block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Two ranks, ``repeats`` round trips of ``nbytes``: each rank sends and receives
    ``repeats`` messages of ``nbytes``; rank 0 returns a positive number of seconds."""
    __tracebackhide__ = True
    what = f"ping_pong({nbytes} bytes, {repeats} repeats)"
    results, stats = run_ranks(lambda c: ping_pong(c, nbytes, repeats), 2, what, block)
    for counter, value in (("messages_sent", repeats), ("messages_recv", repeats),
                           ("bytes_sent", repeats * nbytes), ("bytes_recv", repeats * nbytes)):
        expect_counts(what, stats, counter, [value, value])
    expect(isinstance(results[0], float | np.floating) and results[0] > 0,
           f"{what}: rank 0 should return the one-way time in seconds, got {results[0]!r}")
    expect_rounds(what, stats, 2 * repeats, "ping-pong (2 per round trip)")


def check_ping_pong_on_mpi(ping_pong: Callable[[Any, int, int], float],
                           block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> dict[int, float]:
    """Run ``ping_pong`` on two real MPI processes for 8 B and 1 MiB; plausible times.

    Plausible: positive, below 10 ms for 8 bytes (a loaded laptop manages
    ~10 µs) and below 100 ms for 1 MiB. Returns {nbytes: seconds}.
    """
    __tracebackhide__ = True
    import minidist as md

    sizes = (8, 1 << 20)
    try:
        results = md.launch(measure_on_rank, world_size=2, args=(ping_pong, sizes, 20, block),
                            backend="mpi", timeout=60)
    except RankError as error:
        raise as_one_sentence(error, "ping_pong on MPI") from None
    times = dict(zip(sizes, results[0], strict=True))
    for nbytes, limit in zip(sizes, (1e-2, 1e-1), strict=True):
        seconds = times[nbytes]
        expect(isinstance(seconds, float | np.floating) and 0 < seconds < limit,
               f"ping_pong on MPI: {nbytes} bytes took {seconds!r} s one way; expected a "
               f"positive time below {limit:g} s")
    return times


def measure_on_rank(c: Any, ping_pong: Callable[[Any, int, int], float],
                    sizes: tuple[int, ...], repeats: int, block: tuple[str, ...]) -> list[float]:
    """On each MPI rank: ``ping_pong`` for every size, with ``block`` blocked."""
    with blocked(*block):
        return [ping_pong(c, nbytes, repeats) for nbytes in sizes]
