"""Lab 2's checks, run on the library's reference code, one pytest marker per task.

``pytest -m lab02_broadcast_binomial`` runs the check that grades Task 3
against ``comm.broadcast``. Also: each check fails a wrong answer in one
sentence (a deadlocking ring, a linear "binomial" broadcast, a blocked call).
"""

from __future__ import annotations

import numpy as np
import pytest

from minidist import comm
from minidist.labkit import CheckFailed, task
from minidist.labkit.lab02 import (
    check_broadcast,
    check_fit_line,
    check_ping_pong_on_mpi,
    check_ping_pong_traffic,
    check_reduce,
    check_ring_shift,
)

LIBRARY = ()  # nothing blocked: these tests check the library itself


def ring_shift_with_sendrecv(arr, c):
    """The reference answer of Task 1: one sendrecv (the transport's own primitive)."""
    return c.sendrecv(arr, (c.rank + 1) % c.size, np.empty_like(arr), (c.rank - 1) % c.size)


def ring_shift_blocking(arr, c):
    """Everybody sends, then everybody receives: deadlocks once sends wait for receives."""
    c.send(arr, (c.rank + 1) % c.size)
    return c.recv(np.empty_like(arr), (c.rank - 1) % c.size)


def ping_pong(c, nbytes, repeats):
    """The reference answer of Task 6: median of half a round trip, rank 0 measures."""
    import time

    buf, times = np.zeros(nbytes, np.uint8), []
    for _ in range(repeats):
        start = time.perf_counter()
        if c.rank == 0:
            c.send(buf, 1)
            c.recv(buf, 1)
        else:
            c.recv(buf, 0)
            c.send(buf, 0)
        times.append((time.perf_counter() - start) / 2)
    return float(np.median(times))


@pytest.mark.lab02_ring_shift
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size", [1, 2, 5])
def test_ring_shift(world_size):
    check_ring_shift(ring_shift_with_sendrecv, world_size, 1000, block=LIBRARY)


@pytest.mark.timeout(60)
def test_blocking_ring_deadlocks_in_one_sentence():
    with pytest.raises(CheckFailed, match=r"^ring_shift, P = 3.*deadlock") as failure:
        check_ring_shift(ring_shift_blocking, 3, 100, block=LIBRARY)
    assert "\n" not in str(failure.value)


@pytest.mark.lab02_broadcast_linear
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size, root", [(1, 0), (4, 0), (5, 3)])
def test_linear_broadcast(world_size, root):
    check_broadcast(lambda a, c, r: comm.broadcast(a, c, r, algorithm="linear", check=False),
                    world_size, 7, root, "linear", dtype="int32", block=LIBRARY)


@pytest.mark.lab02_broadcast_binomial
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size, root", [(2, 1), (5, 0), (8, 6)])
def test_binomial_broadcast(world_size, root):
    check_broadcast(lambda a, c, r: comm.broadcast(a, c, r, check=False), world_size, 10, root,
                    "binomial", block=LIBRARY)


@pytest.mark.timeout(60)
def test_linear_broadcast_is_not_binomial():
    with pytest.raises(CheckFailed, match=r"took 4 rounds .* a binomial tree .* takes 3"):
        check_broadcast(lambda a, c, r: comm.broadcast(a, c, r, algorithm="linear", check=False),
                        5, 10, 0, "binomial", block=LIBRARY)


@pytest.mark.lab02_reduce_binomial
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size, root, dtype", [(1, 0, "float64"), (4, 0, "float64"),
                                                     (7, 5, "int64")])
def test_binomial_reduce(world_size, root, dtype):
    check_reduce(lambda a, c, r: comm.reduce(a, c, r, check=False), world_size, 9, root, dtype,
                 block=LIBRARY)


@pytest.mark.timeout(60)
def test_answers_calling_the_library_are_blocked():
    with pytest.raises(CheckFailed, match=r"^Task 4: write your own reduce"):
        with task("Task 4"):
            check_reduce(lambda a, c, r: comm.reduce(a, c, r, check=False), 3, 9, 0)


@pytest.mark.lab02_fit_line
def test_fit_line():
    rng = np.random.default_rng(1)
    sizes = 2.0 ** np.arange(3, 24, 2)
    times = 2e-6 + 3e-10 * sizes * (1 + 0.05 * rng.standard_normal(sizes.size))
    check_fit_line(lambda n, t: tuple(np.polyfit(n, t, 1)[::-1]), sizes, times, "polyfit")
    with pytest.raises(CheckFailed, match="alpha"):
        check_fit_line(lambda n, t: (t[0], np.polyfit(n, t, 1)[0]), sizes, times, "first point")


@pytest.mark.lab02_ping_pong
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ping_pong():
    check_ping_pong_traffic(ping_pong, 1000, 5, block=LIBRARY)
    times = check_ping_pong_on_mpi(ping_pong, block=LIBRARY)
    assert times[1 << 20] > times[8]  # a megabyte takes longer than 8 bytes
