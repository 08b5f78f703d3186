"""Lab 2's checks, run on the library's own answers, one pytest marker per task.

``pytest -m lab02_broadcast_binomial`` runs the check that grades Task 3 against the
library's ``broadcast_binomial``, which is the solution's code (a test below compares
them). Each claim the text makes has a wrong answer here that the check turns away in
one sentence naming it (and a wrong notebook in tests/fixtures/lab02/ that loses exactly
that task's points in the course kit's grading).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from notebook_source import SOLUTIONS, answer_function, code

from minidist import comm
from minidist.comm.collectives import basic
from minidist.comm.ops import UFUNCS
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
NOTEBOOK = SOLUTIONS / "lab02_messages" / "lab02_messages.ipynb"
REAL_PERF_COUNTER = time.perf_counter


@pytest.mark.parametrize("name", ["broadcast_linear", "broadcast_binomial", "reduce_binomial"])
def test_the_answer_is_the_library_code(name):
    assert code(answer_function(NOTEBOOK, name)) == code(getattr(basic, name))


# --- Task 1 -------------------------------------------------------------------------------
def ring_shift_with_sendrecv(arr, c):
    return c.sendrecv(arr, (c.rank + 1) % c.size, np.empty_like(arr), (c.rank - 1) % c.size)


def ring_shift_blocking(arr, c):
    """Everybody sends, then everybody receives: deadlocks once sends wait for receives."""
    c.send(arr, (c.rank + 1) % c.size)
    return c.recv(np.empty_like(arr), (c.rank - 1) % c.size)


def ring_shift_into_arr(arr, c):
    """Receives into its own input and returns it."""
    c.sendrecv(arr.copy(), (c.rank + 1) % c.size, arr, (c.rank - 1) % c.size)
    return arr


@pytest.mark.lab02_ring_shift
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size, dtype", [(2, "int64"), (3, "float32"), (5, "int32")])
def test_ring_shift(world_size, dtype):
    check_ring_shift(ring_shift_with_sendrecv, world_size, 100, dtype, block=LIBRARY)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, message", [
    (ring_shift_blocking, r"^ring_shift, P = 3.*deadlock"),
    (ring_shift_into_arr, r"rank 0 returned its own arr .* the text asks for a new array"),
])
def test_wrong_ring_shifts_fail_in_one_sentence(answer, message):
    with pytest.raises(CheckFailed, match=message) as failure:
        check_ring_shift(answer, 3, 100, block=LIBRARY)
    assert "\n" not in str(failure.value)


# --- Tasks 2 and 3 ------------------------------------------------------------------------
def broadcast_lowest_bit_tree(arr, c, root=0):
    """A binomial tree too, but the other one: farthest child first, parent = me minus my
    lowest set bit. Same messages and rounds as the text's; another schedule."""
    out, p, me = arr.copy(), c.size, (c.rank - root) % c.size
    mask = 1
    while mask < p and not me & mask:
        mask *= 2
    if me:
        c.recv(out, (c.rank - mask) % p)
    mask //= 2
    while mask:
        if me + mask < p:
            c.send(out, (c.rank + mask) % p)
        mask //= 2
    return out


def broadcast_keeps_arr_on_the_root(arr, c, root=0):
    out = basic.broadcast_linear(arr, c, root)
    return arr if c.rank == root else out


def broadcast_as_float64(arr, c, root=0):
    return basic.broadcast_linear(arr, c, root).astype(np.float64)


@pytest.mark.lab02_broadcast_linear
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size, root, dtype", [(1, 0, "float32"), (4, 0, "int32"),
                                                     (5, 3, "float64")])
def test_linear_broadcast(world_size, root, dtype):
    check_broadcast(basic.broadcast_linear, world_size, 7, root, "linear", dtype, block=LIBRARY)


@pytest.mark.lab02_broadcast_binomial
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size, root, dtype", [(1, 0, "float64"), (2, 1, "int64"),
                                                     (8, 6, "int32"), (12, 5, "float32")])
def test_binomial_broadcast(world_size, root, dtype):
    check_broadcast(basic.broadcast_binomial, world_size, 10, root, "binomial", dtype,
                    block=LIBRARY)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, schedule, message", [
    (basic.broadcast_linear, "binomial", r"took 4 rounds .* a binomial tree .* takes 3"),
    (broadcast_lowest_bit_tree, "binomial",
     r"rank 0 \(relative rank 0\) posted send to rank 4, then send to rank 2, then send to "
     r"rank 1; .* nearest first, so it should post send to rank 1, then send to rank 2"),
    (broadcast_keeps_arr_on_the_root, "linear", r"rank 0 returned its own arr"),
    (broadcast_as_float64, "linear", r"returned float64 values; the result keeps the input's "
                                     r"dtype, int32"),
])
def test_wrong_broadcasts_fail_on_the_claim_they_break(answer, schedule, message):
    with pytest.raises(CheckFailed, match=message):
        check_broadcast(answer, 5, 10, 0, schedule, "int32", block=LIBRARY)


# --- Task 4 -------------------------------------------------------------------------------
def reduce_into_arr(arr, c, root=0, op="sum"):
    """The right result, written over the root's own array too."""
    total = basic.reduce_binomial(arr, c, root, op)
    if total is not None:
        arr[...] = total
    return total


def reduce_down_the_broadcast_tree(arr, c, root=0, op="sum"):
    """The broadcast's tree run backwards (children me + 2^k for 2^k above my highest bit,
    farthest first): a binomial reduce in ceil(log2 P) rounds, not the text's schedule."""
    p, me = c.size, (c.rank - root) % c.size
    total, incoming = arr.copy(), np.empty_like(arr)
    high = 1 << (me.bit_length() - 1) if me else 0
    children = [d for d in (1 << k for k in range(p.bit_length())) if d > high and me + d < p]
    for distance in reversed(children):
        c.recv(incoming, (c.rank + distance) % p)
        c.combine(op, total, incoming)
    if me:
        c.send(total, (c.rank - high) % p)
        return None
    return total


def reduce_only_sums(arr, c, root=0, op="sum"):
    return basic.reduce_binomial(arr, c, root, "sum")


class WithoutCombine:
    """The rank as an answer sees it, but reducing with numpy: its combine charges no γ."""

    def __init__(self, c):
        self._c = c

    def __getattr__(self, name):
        return getattr(self._c, name)

    def combine(self, op, acc, incoming, incoming_first=False):
        UFUNCS[op](acc, incoming, out=acc)


def reduce_with_numpy(arr, c, root=0, op="sum"):
    """The text's schedule, reducing with numpy instead of c.combine (it scored 3/3: the
    root's modelled clock missed every γ)."""
    return basic.reduce_binomial(arr, WithoutCombine(c), root, op)


@pytest.mark.lab02_reduce_binomial
@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size, root, dtype, op", [
    (1, 0, "float64", "prod"), (4, 0, "float32", "sum"), (7, 5, "int64", "max"),
    (8, 1, "int32", "prod"), (5, 4, "float64", "min")])
def test_binomial_reduce(world_size, root, dtype, op):
    check_reduce(basic.reduce_binomial, world_size, 9, root, dtype, block=LIBRARY, op=op)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer, op, message", [
    (reduce_into_arr, "sum", r"rank 0's arr was changed in place; the text asks to leave arr"),
    (reduce_down_the_broadcast_tree, "sum",
     r"rank 0 \(relative rank 0\) posted recv from rank 4, then recv from rank 2, .* lowest "
     r"set bit"),
    (reduce_only_sums, "max", r"op 'max'.*the root's result: differs"),
    (reduce_with_numpy, "sum", r"rank 0 reduced 0 bytes through c.combine, expected 216 \(one "
                               r"N-byte partial result per child\); reduce with c.combine"),
])
def test_wrong_reduces_fail_on_the_claim_they_break(answer, op, message):
    with pytest.raises(CheckFailed, match=message):
        check_reduce(answer, 6, 9, 0, "int64", block=LIBRARY, op=op)


@pytest.mark.timeout(60)
def test_answers_calling_the_library_are_blocked():
    for answer in (lambda a, c, r, o: comm.reduce(a, c, r, o, check=False),
                   basic.reduce_binomial):
        with pytest.raises(CheckFailed, match=r"^Task 4: write your own reduce"):
            with task("Task 4"):
                check_reduce(answer, 3, 9, 0)


# --- Tasks 5 and 6 ------------------------------------------------------------------------
@pytest.mark.lab02_fit_line
def test_fit_line():
    rng = np.random.default_rng(1)
    sizes = 2.0 ** np.arange(3, 24, 2)
    times = 2e-6 + 3e-10 * sizes * (1 + 0.05 * rng.standard_normal(sizes.size))
    check_fit_line(lambda n, t: tuple(np.polyfit(n, t, 1)[::-1]), sizes, times, "polyfit")
    check_fit_line(lambda n, t: tuple(np.polyfit(n, t, 1)[::-1]), [1, 2], [3.0, 5.0], "lists")
    with pytest.raises(CheckFailed, match="alpha"):
        check_fit_line(lambda n, t: (t[0], np.polyfit(n, t, 1)[0]), sizes, times, "first point")
    with pytest.raises(CheckFailed, match="alpha is a ndarray; the text asks for two floats"):
        check_fit_line(lambda n, t: np.polyfit(n, t, 1)[::-1, None], sizes, times, "columns")


def ping_pong(c, nbytes, repeats, summary=np.median, halve=True):
    """Task 6's answer (``summary`` and ``halve`` make it wrong)."""
    buf, times = np.zeros(nbytes, np.uint8), []
    for _ in range(repeats):
        start = time.perf_counter()
        if c.rank == 0:
            c.send(buf, 1)
            c.recv(buf, 1)
        else:
            c.recv(buf, 0)
            c.send(buf, 0)
        times.append((time.perf_counter() - start) / (2 if halve else 1))
    return float(summary(times))


@pytest.mark.lab02_ping_pong
@pytest.mark.timeout(60)
@pytest.mark.parametrize("nbytes, repeats", [(8, 7), (1000, 5), (1 << 16, 3)])
def test_ping_pong_on_the_modelled_clock(nbytes, repeats):
    check_ping_pong_traffic(ping_pong, nbytes, repeats, block=LIBRARY)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("options, message", [
    (dict(summary=np.mean), r"rank 0 returned .* so the median of their halves"),
    (dict(summary=np.min), r"rank 0 returned .* so the median of their halves"),
    (dict(halve=False), r"rank 0 returned .* so the median of their halves"),
])
def test_wrong_ping_pongs_fail_on_the_claim_they_break(options, message):
    with pytest.raises(CheckFailed, match=message):
        check_ping_pong_traffic(lambda c, n, r: ping_pong(c, n, r, **options), 1000, 5,
                                block=LIBRARY)
    assert time.perf_counter is REAL_PERF_COUNTER  # the real clock is back after the check


@pytest.mark.lab02_ping_pong
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ping_pong_on_mpi_counts_messages_not_time():
    times = check_ping_pong_on_mpi(ping_pong, block=LIBRARY)
    assert set(times) == {5, 1 << 20} and all(t > 0 for t in times.values())
    with pytest.raises(CheckFailed, match=r"5 bytes, 5 repeats: rank 0 has messages_sent = 6"):
        check_ping_pong_on_mpi(lambda c, n, r: ping_pong(c, n, r + 1), block=LIBRARY)
