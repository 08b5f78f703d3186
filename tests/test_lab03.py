"""Lab 3's checks, run on the library's allreduce algorithms, one pytest marker per task.

``pytest -m lab03_ring`` runs the check that grades Task 3 against
``comm.allreduce(..., algorithm="ring")``. Also: the traffic checks fail the
classic wrong answers (a ring that passes the whole vector, a naive allreduce
called a tree), and the formulas agree with the cost model.
"""

from __future__ import annotations

import numpy as np
import pytest

from minidist import comm
from minidist.labkit import CheckFailed, task
from minidist.labkit.lab03 import check_allreduce, check_cost_model, check_ring_on_mpi

LIBRARY = ()  # nothing blocked: these tests check the library itself
SHAPES = [(1, 5), (2, 0), (3, 2), (4, 16), (5, 13), (6, 100), (8, 9)]  # (P, n): n < P, 0, ...


def library(algorithm):
    return lambda arr, c: comm.allreduce(arr, c, algorithm=algorithm, check=False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", [
    pytest.param(name, marks=getattr(pytest.mark, f"lab03_{name}"))
    for name in ("naive", "ps", "ring", "tree")])
def test_library_algorithm_passes(algorithm):
    for world_size, n in SHAPES:
        check_allreduce(algorithm, library(algorithm), world_size, n, block=LIBRARY)
    check_allreduce(algorithm, library(algorithm), 7, 30, dtype="int64", seed=3, block=LIBRARY)


def whole_vector_ring(arr, c):
    """Wrong: passes the whole (partial) vector around the ring, P-1 hops, then P-1 more."""
    out, incoming = arr.copy(), np.empty_like(arr)
    right, left = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    travelling = arr.copy()
    for _ in range(c.size - 1):
        c.sendrecv(travelling, right, incoming, left)
        travelling = incoming.copy()
        out += incoming
    for _ in range(c.size - 1):  # a second lap, as if it were the allgather
        c.sendrecv(travelling, right, incoming, left)
    return out


@pytest.mark.timeout(60)
def test_whole_vector_ring_fails_on_bytes():
    with pytest.raises(CheckFailed, match=r"bytes sent in all, a ring sends 2\(P-1\)N"):
        check_allreduce("ring", whole_vector_ring, 4, 12, dtype="int64", block=LIBRARY)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wrong, algorithm, world_size, message", [
    ("naive", "tree", 8, "a rank received 7 messages"),
    ("naive", "ring", 4, "messages_sent = 3, expected 6"),
    ("ring", "naive", 4, "messages_sent = 6, expected 3"),
    ("ring", "ps", 5, "bytes_sent"),
    ("ps", "ring", 5, "sent to ranks"),
])
def test_algorithms_are_told_apart_by_traffic(wrong, algorithm, world_size, message):
    with pytest.raises(CheckFailed, match=message):
        check_allreduce(algorithm, library(wrong), world_size, 23, block=LIBRARY)


@pytest.mark.timeout(60)
def test_calling_the_library_scores_zero():
    with pytest.raises(CheckFailed, match=r"^Task 3: write your own allreduce"):
        with task("Task 3"):
            check_allreduce("ring", library("ring"), 3, 10)


@pytest.mark.lab03_cost
def test_cost_formulas():
    def bytes_sent(algorithm, p, n):
        return {"naive": (p - 1) * n, "ps": 2 * (p - 1) * n / p, "ring": 2 * (p - 1) * n / p}[
            algorithm]

    def time(algorithm, p, n, alpha, beta):
        per_message = n if algorithm == "naive" else n / p
        return 2 * (p - 1) * (alpha + beta * per_message)

    cases = [(a, p, n, 2e-6, 1e-9) for a in ("naive", "ps", "ring") for p, n in
             [(2, 1000), (6, 4_800_000), (16, 1 << 20)]]
    check_cost_model(bytes_sent, time, cases)
    with pytest.raises(CheckFailed, match="modelled time, ring"):
        check_cost_model(bytes_sent, lambda a, p, n, al, be: (p - 1) * (al + be * n / p),
                         [("ring", 4, 4000, 1e-6, 1e-9)])


@pytest.mark.lab03_ring_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ring_on_mpi():
    check_ring_on_mpi(library("ring"), 3, 10, dtype="int64", block=LIBRARY)
