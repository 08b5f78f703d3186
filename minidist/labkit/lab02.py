"""Checks for Lab 2 (processes and messages): each claim of a task's text, in a sentence.

Every multi-rank check runs the student's function on in-process ranks with
the library's collectives blocked (``labkit/ranks.py``) and then checks, in
this order: the values (against numpy); the result itself (a new array of
the input's dtype, the input left as it was); the traffic the text states
(messages, bytes, rounds); and, where the text prescribes a schedule, whom
each rank received from and sent to, in order (a binomial tree numbered
from the root, nearest child first). A "binomial" broadcast that is really
linear moves the right bytes but takes P-1 rounds instead of ceil(log2 P).

Task 6 times messages. Wall-clock times depend on the machine and its load,
so nothing graded reads them: on the in-process transport,
``time.perf_counter()`` reads the rank's *modelled* clock while the check
runs, rank 1 pauses (on that clock) before some replies, and the answer must
return exactly the median of the halved round trips; on real MPI processes
only the counters and the type of the result are checked (``lab02_mpi.py``).
(Graded, the ranks run in the grader and lend their communicators to the
student's functions, ``relay.py``; the MPI run starts where the student's
code is, a probe.)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm.ops import UFUNCS
from minidist.labkit.checks import expect, expect_close
from minidist.labkit.lab02_mpi import check_ping_pong_on_mpi  # noqa: F401 (the notebook's import)
from minidist.labkit.ranks import (
    LIBRARY_COLLECTIVES,
    MessageLog,
    expect_counts,
    expect_new_arrays,
    expect_rounds,
    rank_inputs,
    run_ranks,
)

BROADCAST_RULE = ("in the text's schedule a rank receives once, from relative rank me - 2^j "
                  "(2^j the highest set bit of me), then sends to me + 2^k for each k > j, "
                  "nearest first")
REDUCE_RULE = ("in the text's schedule a rank receives from relative ranks me + 1, me + 2, "
               "me + 4, ... while that bit of me is clear, then sends to me - 2^k (2^k its "
               "lowest set bit) and is done")
PONG_DELAYS = (9e-6, 0.0, 4e-6, 1e-6, 16e-6, 25e-6, 36e-6)  # rank 1's pauses, modelled


def log2_rounds(world_size: int) -> int:
    """ceil(log2 P): the rounds of a binomial tree over P ranks."""
    return math.ceil(math.log2(world_size)) if world_size > 1 else 0


def binomial_calls(p: int, root: int, rank: int, up: bool) -> list[tuple[str, int]]:
    """What ``rank`` posts in the text's binomial broadcast (``up=False``) or reduce."""
    me, calls, distance = (rank - root) % p, [], 1
    while distance < p:  # round k: distance = 2^k
        if up and me & distance:
            return [*calls, ("send", (rank - distance) % p)]
        if up and me + distance < p:
            calls.append(("recv", (rank + distance) % p))
        elif not up and me < distance and me + distance < p:
            calls.append(("send", (rank + distance) % p))
        elif not up and distance <= me < 2 * distance:
            calls.append(("recv", (rank - distance) % p))
        distance *= 2
    return calls


def expect_schedule(what: str, calls: list[list[tuple[str, int]]], root: int, up: bool) -> None:
    """Each rank posted exactly the sends and receives of the text's binomial tree, in order."""
    __tracebackhide__ = True
    p = len(calls)

    def said(posted: list[tuple[str, int]]) -> str:
        return ", then ".join(f"{kind} {'to' if kind == 'send' else 'from'} rank {peer}"
                              for kind, peer in posted) or "nothing"

    for rank, posted in enumerate(calls):
        wanted = binomial_calls(p, root, rank, up)
        expect(posted == wanted, f"{what}: rank {rank} (relative rank {(rank - root) % p}) "
               f"posted {said(posted)}; {REDUCE_RULE if up else BROADCAST_RULE}, so it "
               f"should post {said(wanted)}")


def run_rooted(answer: Callable[..., Any], world_size: int, n: int, dtype: str, seed: int,
               block: tuple[str, ...], what: str, *args: Any) -> tuple:
    """``answer(arr, c, *args)`` on each rank, ``arr`` its own input, ``c`` logged
    (:class:`MessageLog`): the inputs as drawn, each rank's ``arr`` afterwards, the
    results, the counters, each rank's calls and the bytes it reduced through combine."""
    data = rank_inputs(world_size, n, dtype, seed)
    inputs = [row.copy() for row in data]
    calls: list[list[tuple[str, int]]] = [[] for _ in range(world_size)]
    reduced = [[0] for _ in range(world_size)]  # bytes each rank reduced through combine
    results, stats = run_ranks(lambda c: answer(inputs[c.rank], MessageLog(
        c, calls[c.rank], reduced[c.rank]), *args), world_size, what, block)
    return data, inputs, results, stats, calls, [count for count, in reduced]


# --- Task 1: a ring exchange that cannot deadlock ------------------------------------------
def check_ring_shift(ring_shift: Callable[[np.ndarray, Any], np.ndarray], world_size: int,
                     n: int, dtype: str = "float64", seed: int = 0,
                     block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Rank r must return (a new array holding) rank r-1's array; one message per rank;
    every send waits for its receive (rendezvous)."""
    __tracebackhide__ = True
    what = f"ring_shift, P = {world_size}, {n} x {dtype}, rendezvous sends"
    data = rank_inputs(world_size, n, dtype, seed)
    inputs = [row.copy() for row in data]
    results, stats = run_ranks(lambda c: ring_shift(inputs[c.rank], c), world_size, what,
                               block, eager_limit=0)
    for rank, got in enumerate(results):
        expect_close(f"{what}: rank {rank} (should hold rank {(rank - 1) % world_size}'s array)",
                     got, data[(rank - 1) % world_size], rtol=0, atol=0)
    expect_new_arrays(what, results, inputs, data)
    expect_counts(what, stats, "messages_sent", [1] * world_size,
                  "the text: each rank sends exactly one message")
    expect_counts(what, stats, "bytes_sent", [data[0].nbytes] * world_size,
                  "one message holding the whole array")


# --- Tasks 2-3: broadcast, linear and binomial ---------------------------------------------
def check_broadcast(broadcast: Callable[[np.ndarray, Any, int], np.ndarray], world_size: int,
                    n: int, root: int, schedule: str, dtype: str = "float64",
                    seed: int = 0, block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Every rank must return (a new array of) the root's array; traffic and schedule.

    Both: each rank but the root receives exactly one message of N bytes, the
    root none, P-1 messages in all. Linear: the root sends all of them, P-1
    rounds. Binomial: ceil(log2 P) rounds, along the text's tree.
    """
    __tracebackhide__ = True
    what = f"{schedule} broadcast, P = {world_size}, root {root}, {n} x {dtype}"
    data, inputs, results, stats, calls, _ = run_rooted(broadcast, world_size, n, dtype,
                                                        seed, block, what, root)
    for rank, got in enumerate(results):
        expect_close(f"{what}: rank {rank}'s result", got, data[root], rtol=0, atol=0)
    expect_new_arrays(what, results, inputs, data)
    others = [0 if r == root else 1 for r in range(world_size)]
    expect_counts(what, stats, "messages_recv", others,
                  "every rank but the root receives the array once")
    expect_counts(what, stats, "bytes_recv", [k * data[0].nbytes for k in others],
                  "one message of N bytes")
    sent = sum(s.messages_sent for s in stats)
    expect(sent == world_size - 1, f"{what}: {sent} messages sent in all, expected P-1 = "
           f"{world_size - 1}")
    if schedule == "linear":
        expect_counts(what, stats, "messages_sent",
                      [world_size - 1 if r == root else 0 for r in range(world_size)],
                      "the root sends to each rank in turn")
        expect_rounds(what, stats, world_size - 1, "linear broadcast (P-1)")
    else:
        expect_rounds(what, stats, log2_rounds(world_size), "binomial tree (ceil(log2 P))")
        expect_schedule(what, calls, root, up=False)


# --- Task 4: reduce along a binomial tree --------------------------------------------------
def check_reduce(reduce: Callable[[np.ndarray, Any, int, str], np.ndarray | None],
                 world_size: int, n: int, root: int, dtype: str = "float64", seed: int = 0,
                 block: tuple[str, ...] = LIBRARY_COLLECTIVES, op: str = "sum") -> None:
    """The root must return (a new array of) the reduction with ``op``, the others None;
    each non-root rank sends one message of N bytes; ceil(log2 P) rounds, the text's tree."""
    __tracebackhide__ = True
    what = f"binomial reduce, op {op!r}, P = {world_size}, root {root}, {n} x {dtype}"
    data, inputs, results, stats, calls, reduced = run_rooted(reduce, world_size, n, dtype,
                                                              seed, block, what, root, op)
    tolerance = {"float32": 1e-5, "float64": 1e-12}.get(dtype, 0.0)
    expect_close(f"{what}: the root's result", results[root],
                 UFUNCS[op].reduce(data, axis=0).astype(dtype), rtol=tolerance, atol=tolerance)
    for rank, got in enumerate(results):
        expect(rank == root or got is None, f"{what}: rank {rank} is not the root and should "
               f"return None, got {type(got).__name__}")
    expect_new_arrays(what, results, inputs, data)
    others = [0 if r == root else 1 for r in range(world_size)]
    expect_counts(what, stats, "messages_sent", others,
                  "each rank but the root sends its partial result once")
    expect_counts(what, stats, "bytes_sent", [k * data[0].nbytes for k in others],
                  "one message of N bytes")
    expect_rounds(what, stats, log2_rounds(world_size), "binomial tree (ceil(log2 P))")
    expect_schedule(what, calls, root, up=True)
    for rank, got in enumerate(reduced):  # one partial result of N bytes per child
        want = binomial_children((rank - root) % world_size, world_size) * data[0].nbytes
        expect(got == want, f"{what}: rank {rank} reduced {got} bytes through c.combine, "
               f"expected {want} (one N-byte partial result per child); reduce with "
               "c.combine(op, total, incoming), which the clock charges γ per byte")


def binomial_children(relative: int, p: int) -> int:
    """How many ranks send their partial result to relative rank ``relative`` in the
    text's binomial tree: ``relative + 2^j`` for each ``2^j`` below its lowest set bit."""
    children, step = 0, 1
    while step < p and relative % (2 * step) == 0:
        children += relative + step < p
        step *= 2
    return children


# --- Tasks 5-6: measuring alpha and beta ---------------------------------------------------
def check_fit_line(fit_line: Callable[[Any, Any], tuple[float, float]], sizes: Any,
                   times: Any, what: str) -> None:
    """``fit_line(sizes, times)`` must return the least-squares (alpha, beta) of
    t = alpha + beta n, as two floats."""
    __tracebackhide__ = True
    design = np.stack([np.ones(len(sizes)), np.asarray(sizes, dtype=np.float64)], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(design, np.asarray(times, dtype=np.float64), rcond=None)
    got = fit_line(sizes, times)
    expect(len(got) == 2, f"{what}: return (alpha, beta), got {len(got)} values")
    for name, value in zip(("alpha", "beta"), got, strict=True):
        expect(isinstance(value, float), f"{what}: {name} is a {type(value).__name__}; the "
               "text asks for two floats")
    expect_close(f"{what}: alpha", got[0], alpha, rtol=1e-6, atol=1e-15)
    expect_close(f"{what}: beta", got[1], beta, rtol=1e-6, atol=1e-20)


class SlowReplies(MessageLog):
    """Rank 1 in the ping-pong checks: before its i-th send it computes ``PONG_DELAYS[i]``
    seconds on the modelled clock, so that the round trips differ (their median is not
    their mean nor their minimum)."""

    def note(self, kind: str, peer: int) -> None:
        if kind == "send":
            sent = sum(k == "send" for k, _ in self.calls)
            self._c.compute(PONG_DELAYS[sent % len(PONG_DELAYS)])
        super().note(kind, peer)


def ping_pong_on_the_model(ping_pong: Callable[[Any, int, int], float], nbytes: int,
                           repeats: int, what: str, block: tuple[str, ...]) -> tuple[list, list]:
    """Run ``ping_pong`` on two in-process ranks, rank 1 replying slowly, timed on the model."""
    def body(c: Any) -> Any:
        return ping_pong(SlowReplies(c, []) if c.rank == 1 else c, nbytes, repeats)

    return run_ranks(body, 2, what, block, modelled_perf_counter=True)


def modelled_round_trips(nbytes: int, repeats: int) -> list[float]:
    """Rank 0's round trips on the modelled clock, measured by the check itself."""
    def measure(c: Any, nbytes: int, repeats: int) -> list[float]:
        buf, trips = np.zeros(nbytes, np.uint8), []
        for _ in range(repeats):
            start = time.perf_counter()
            peer = 1 - c.rank
            for step in ((c.send, c.recv) if c.rank == 0 else (c.recv, c.send)):
                step(buf, peer)
            trips.append(time.perf_counter() - start)
        return trips

    return ping_pong_on_the_model(measure, nbytes, repeats, "the check's ping-pong", ())[0][0]


def check_ping_pong_traffic(ping_pong: Callable[[Any, int, int], float], nbytes: int,
                            repeats: int, block: tuple[str, ...] = LIBRARY_COLLECTIVES) -> None:
    """Two in-process ranks, ``repeats`` round trips of ``nbytes``: each rank sends and
    receives ``repeats`` messages of ``nbytes``, and rank 0 returns the median of half the
    round trips, exactly, on the modelled clock."""
    __tracebackhide__ = True
    what = f"ping_pong({nbytes} bytes, {repeats} repeats)"
    results, stats = ping_pong_on_the_model(ping_pong, nbytes, repeats, what, block)
    for counter, value in (("messages_sent", repeats), ("messages_recv", repeats),
                           ("bytes_sent", repeats * nbytes), ("bytes_recv", repeats * nbytes)):
        expect_counts(what, stats, counter, [value, value],
                      "one message of nbytes each way per round trip, nothing else")
    expect_rounds(what, stats, 2 * repeats, "ping-pong (2 per round trip)")
    got = results[0]
    expect(isinstance(got, float), f"{what}: rank 0 returned {got!r}; the text asks for the "
           "one-way time in seconds, a float")
    trips = modelled_round_trips(nbytes, repeats)
    expected = float(np.median(trips)) / 2
    expect(math.isclose(got, expected, rel_tol=1e-9), f"{what}: rank 0 returned {got:.6g} s; "
           "during this check time.perf_counter() reads the modelled clock, where the round "
           f"trips took {', '.join(f'{t * 1e6:.2f}' for t in trips)} µs (rank 1 pauses before "
           f"some replies), so the median of their halves, as the text asks, is {expected:.6g} s")
