"""Lab 2, Task 6 on real MPI processes: the ping-pong's counters, not its times.

Run where the student runs the check (the function is their own), the job is
two MPI processes started from their process (the probe ``ping_pong_on_mpi``),
each running ``ping_pong`` with the library's collectives blocked
(``measure_on_rank``). When the lab is graded ``ping_pong`` lives in the kernel
(a ``Remote``), and the two MPI processes are the grader's own
(``mpi_ranks.py``): the function in the kernel drives them, and the counters
are what those processes counted, out of the student's code's reach. Only the
counters and the type of the result are judged: a busy machine's times are
anything. Apart from ``lab02.py``, whose checks run on in-process ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minidist.comm import CommStats
from minidist.comm.errors import RankError
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import expect
from minidist.labkit.mpi_ranks import MPIRanks, run_on_mpi_ranks
from minidist.labkit.ranks import LIBRARY_COLLECTIVES, as_one_sentence, expect_counts
from minidist.labkit.remote import Remote, on_student


def check_ping_pong_on_mpi(ping_pong: Callable[[Any, int, int], float],
                           block: tuple[str, ...] = LIBRARY_COLLECTIVES,
                           repeats: int = 5) -> dict[int, float]:
    """Run ``ping_pong`` on two real MPI processes for 5 B and 1 MiB: the MPI transport's
    counters show ``repeats`` messages of that size each way, and rank 0 returns a positive
    float. Returns {nbytes: seconds}, for showing only: a busy machine's times are anything.
    The processes are the grader's when the lab is graded (module docstring)."""
    __tracebackhide__ = True
    sizes = (5, 1 << 20)  # not whole float64s: nbytes of np.uint8, as the text says
    if isinstance(ping_pong, Remote):
        results = ping_pong_on_graders_mpi(ping_pong, sizes, repeats, block)
    else:
        results = on_student(ping_pong_on_mpi, ping_pong, sizes, repeats, block)
    for k, nbytes in enumerate(sizes):
        what = f"ping_pong on MPI, {nbytes} bytes, {repeats} repeats"
        stats = [CommStats(*results[rank][k][1:]) for rank in (0, 1)]
        for counter, value in (("messages_sent", repeats), ("bytes_sent", repeats * nbytes)):
            expect_counts(what, stats, counter, [value, value],
                          "one message of nbytes each way per round trip, nothing else")
        seconds = results[0][k][0]
        expect(isinstance(seconds, float) and seconds > 0, f"{what}: rank 0 returned "
               f"{seconds!r}; the text asks for the one-way time in seconds, a positive float")
    return {nbytes: results[0][k][0] for k, nbytes in enumerate(sizes)}


def ping_pong_on_graders_mpi(ping_pong: Callable[[Any, int, int], float],
                             sizes: tuple[int, ...], repeats: int,
                             block: tuple[str, ...]) -> list[list[tuple]]:
    """``ping_pong`` in the kernel driving the grader's two MPI processes, for each size;
    per rank and size, its result and the messages and bytes its MPI process sent."""
    __tracebackhide__ = True
    measured: list[list[tuple]] = [[], []]
    with MPIRanks(2) as ranks:
        for nbytes in sizes:
            results, stats = run_on_mpi_ranks(
                ranks, lambda c, n=nbytes: ping_pong(c, n, repeats),
                f"ping_pong on MPI, {nbytes} bytes", block)
            for rank in (0, 1):
                measured[rank].append((results[rank], stats[rank].messages_sent,
                                       stats[rank].bytes_sent))
    return measured


def ping_pong_on_mpi(ping_pong: Callable[[Any, int, int], float], sizes: tuple[int, ...],
                     repeats: int, block: tuple[str, ...]) -> list[list[tuple]]:
    """Probe: ``ping_pong`` on two MPI processes for each size; per rank and size, its
    result and the messages and bytes the rank sent."""
    import minidist as md

    try:
        return md.launch(measure_on_rank, world_size=2, args=(ping_pong, sizes, repeats, block),
                         backend="mpi", timeout=60)
    except RankError as error:
        raise as_one_sentence(error, "ping_pong on MPI") from None


def measure_on_rank(c: Any, ping_pong: Callable[[Any, int, int], float], sizes: tuple[int, ...],
                    repeats: int, block: tuple[str, ...]) -> list[tuple[float, int, int]]:
    """On each MPI rank: ``ping_pong`` for every size, with ``block`` blocked; its result
    and the messages and bytes the rank sent for that size."""
    measured = []
    with blocked(*block):
        for nbytes in sizes:
            c.stats.reset()
            seconds = ping_pong(c, nbytes, repeats)
            measured.append((seconds, c.stats.messages_sent, c.stats.bytes_sent))
    return measured
