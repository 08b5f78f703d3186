"""Lab 2, Task 6 on real MPI processes: the ping-pong's counters, not its times.

The check starts a job of two MPI processes where the student's
``ping_pong`` lives (the probe ``ping_pong_on_mpi``, ``remote.on_student``:
in the kernel when the lab is graded); each rank runs it with the library's
collectives blocked (``measure_on_rank``). Only the counters and the type of
the result are judged: a busy machine's times are anything. Apart from
``lab02.py``, whose checks run on in-process ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minidist.comm import CommStats
from minidist.comm.errors import RankError
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import expect
from minidist.labkit.ranks import LIBRARY_COLLECTIVES, as_one_sentence, expect_counts
from minidist.labkit.remote import on_student


def check_ping_pong_on_mpi(ping_pong: Callable[[Any, int, int], float],
                           block: tuple[str, ...] = LIBRARY_COLLECTIVES,
                           repeats: int = 5) -> dict[int, float]:
    """Run ``ping_pong`` on two real MPI processes for 8 B and 1 MiB: the MPI transport's
    counters show ``repeats`` messages of that size each way, and rank 0 returns a positive
    float. Returns {nbytes: seconds}, for showing only: a busy machine's times are anything.
    The job starts where ``ping_pong`` lives (``remote.on_student``; grading/README.md)."""
    __tracebackhide__ = True
    sizes = (8, 1 << 20)
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
