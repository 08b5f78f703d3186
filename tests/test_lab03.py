"""Lab 3's checks, run on the library's allreduce algorithms, one pytest marker per task.

``pytest -m lab03_ring`` runs the check that grades Task 3 against the library's
``ring_allreduce``, which is the solution's answer, statement for statement (a test
below compares the two). Also: every claim a check makes rejects a known-wrong answer
with a sentence that names the claim, and the formulas agree with the cost model.
"""

from __future__ import annotations

import numpy as np
import pytest
from notebook_source import SOLUTIONS, answer_function, code

from minidist.comm import ALGORITHMS, cost
from minidist.comm.collectives import central, ring, tree
from minidist.labkit import CheckFailed, task
from minidist.labkit.lab03 import check_allreduce, check_cost_model, check_ring_on_mpi
from minidist.util import chunk_bounds

NOTEBOOK = SOLUTIONS / "lab03_allreduce" / "lab03_allreduce.ipynb"
LIBRARY = ()  # nothing blocked: these tests check the library itself
SHAPES = [(1, 5), (2, 0), (3, 2), (4, 16), (5, 13), (6, 100), (8, 9)]  # (P, n): n < P, 0, ...
ANSWERS = {"naive": central.naive_allreduce, "ps": central.ps_allreduce,
           "ring": ring.ring_allreduce, "tree": tree.tree_allreduce}


@pytest.mark.parametrize("name", list(ANSWERS))
def test_the_solution_is_the_library_code(name):
    library = ANSWERS[name]
    assert ALGORITHMS[name] is library
    assert code(answer_function(NOTEBOOK, library.__name__)) == code(library)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", [
    pytest.param(name, marks=getattr(pytest.mark, f"lab03_{name}")) for name in ANSWERS])
def test_library_algorithm_passes(algorithm):
    for world_size, n in SHAPES:
        for dtype, op in (("float64", "sum"), ("float32", "max"), ("int32", "min"),
                          ("int64", "sum")):
            check_allreduce(algorithm, ANSWERS[algorithm], world_size, n, dtype, op,
                            block=LIBRARY)


def whole_vector_ring(x, c, op="sum"):
    """Wrong: passes the whole (partial) vector round the ring, then round again."""
    right, left = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    travelling, incoming = x.copy(), np.empty_like(x)
    for _ in range(c.size - 1):
        c.sendrecv(travelling, right, incoming, left)
        travelling[...] = incoming
        c.combine(op, x, incoming)
    for _ in range(c.size - 1):  # a second lap, as if it were the allgather
        c.sendrecv(travelling, right, incoming, left)
    return x


def floats_for_ints(x, c, op="sum"):
    """Wrong: right values, handed back as float64 (x itself only when x is float64)."""
    return central.naive_allreduce(x, c, op).astype(np.float64, copy=False)


def on_a_copy(x, c, op="sum"):
    """Wrong: reduces a copy of x and returns it."""
    return tree.tree_allreduce(x.copy(), c, op)


def skips_empty_chunks(x, c, op="sum"):
    """Wrong: a ring that sends no message for an empty chunk (n < P)."""
    right, left = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    bounds = chunk_bounds(len(x), c.size)
    for phase in (0, 1):
        for step in range(c.size - 1):
            send = bounds[(c.rank + phase - step) % c.size]
            receive = bounds[(c.rank + phase - step - 1) % c.size]
            if send[1] > send[0]:
                request = c.isend(x[slice(*send)], right)
            if receive[1] > receive[0]:
                incoming = c.recv(np.empty(receive[1] - receive[0], x.dtype), left)
                if phase == 0:
                    c.combine(op, x[slice(*receive)], incoming)
                else:
                    x[slice(*receive)] = incoming
            if send[1] > send[0]:
                request.wait()
    return x


def adds_with_numpy(x, c, op="sum"):
    """Wrong: a naive allreduce that adds with +=, which the clock does not see."""
    if c.rank == 0:
        incoming = np.empty_like(x)
        for source in range(1, c.size):
            x += c.recv(incoming, source)
        for dest in range(1, c.size):
            c.send(x, dest)
    else:
        c.send(x, 0)
        c.recv(x, 0)
    return x


def ps_in_rank_order(x, c, op="sum"):
    """Wrong: every rank pushes to ranks 0, 1, 2, ... in that order, and pulls alike."""
    bounds = chunk_bounds(len(x), c.size)
    lo, hi = bounds[c.rank]
    peers = [k for k in range(c.size) if k != c.rank]
    requests = [c.isend(x[slice(*bounds[k])], k) for k in peers]
    for source in peers:
        c.combine(op, x[lo:hi], c.recv(np.empty(hi - lo, x.dtype), source))
    for request in requests:
        request.wait()
    requests = [c.isend(x[lo:hi], k) for k in peers]
    for source in peers:
        c.recv(x[slice(*bounds[source])], source)
    for request in requests:
        request.wait()
    return x


def tree_right_child_first(x, c, op="sum"):
    """Wrong: a tree that sends down to child 2r+2 before 2r+1."""
    children = [k for k in (2 * c.rank + 2, 2 * c.rank + 1) if k < c.size]
    for child in sorted(children):
        c.combine(op, x, c.recv(np.empty_like(x), child))
    if c.rank > 0:
        c.send(x, (c.rank - 1) // 2)
        c.recv(x, (c.rank - 1) // 2)
    for child in children:
        c.send(x, child)
    return x


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wrong, algorithm, case, message", [
    (whole_vector_ring, "ring", (4, 12, "int64"), r"bytes sent in all, a ring sends 2\(P-1\)N"),
    (floats_for_ints, "naive", (3, 5, "int32"), "returned float64 values for int32 input"),
    (on_a_copy, "tree", (4, 6, "float64"), "returned a new array; reduce in place"),
    (skips_empty_chunks, "ring", (5, 3, "float64"), r"messages_sent = \d, expected 8 \(a ring "
     r"sends 2\(P-1\) messages per rank, one chunk per step: .* even an empty one"),
    (adds_with_numpy, "naive", (3, 4, "int64"), "rank 0 reduced 0 bytes through c.combine"),
    (ps_in_rank_order, "ps", (8, 64, "float64"), r"took 20 rounds .* the text's schedule "
     r"takes 14 rounds"),
    (tree_right_child_first, "tree", (3, 4, "float64"), r"rank 0 posted recv from rank 1, then "
     r"recv from rank 2, then send to rank 2, then send to rank 1; rank r receives"),
    (central.naive_allreduce, "tree", (8, 23, "float64"), "rank 0 has messages_sent = 7"),
    (central.naive_allreduce, "ring", (4, 23, "float64"), "messages_sent = 3, expected 6"),
    (ring.ring_allreduce, "naive", (4, 23, "float64"), "messages_sent = 6, expected 3"),
    (ring.ring_allreduce, "ps", (5, 23, "float64"), "bytes_sent"),
    (central.ps_allreduce, "ring", (5, 23, "float64"), "bytes_sent = 304, expected 288"),
])
def test_each_claim_rejects_a_wrong_answer(wrong, algorithm, case, message):
    world_size, n, dtype = case
    with pytest.raises(CheckFailed, match=message):
        check_allreduce(algorithm, wrong, world_size, n, dtype, block=LIBRARY)


@pytest.mark.timeout(60)
def test_calling_the_library_scores_zero():
    from minidist import comm

    with pytest.raises(CheckFailed, match=r"^Task 3: write your own allreduce"):
        with task("Task 3"):
            check_allreduce("ring", lambda x, c, op="sum": comm.allreduce(x, c, op, out=x), 3, 10)


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
    with pytest.raises(CheckFailed, match="^Task 5: write your own"):
        with task("Task 5"):
            check_cost_model(lambda a, p, n: cost.predict(a, p, n, 1).max_bytes_sent, time,
                             cases[:1])


@pytest.mark.lab03_ring_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_ring_on_mpi():
    check_ring_on_mpi(ring.ring_allreduce, 3, 10, dtype="int64", block=LIBRARY)


def test_task_6_judges_the_bytes_on_in_process_ranks_before_starting_mpi():
    """The dry run's traffic is counted where the check runs (the grader's ranks when
    graded), so counters forged in the MPI processes cannot keep Task 6."""
    with pytest.raises(CheckFailed, match=r"on in-process ranks first, 960 bytes were sent in "
                       r"all; a ring sends 2\(P-1\)N = 320, so it was not started on MPI"):
        check_ring_on_mpi(whole_vector_ring, 3, 10, dtype="int64", block=LIBRARY)


def not_done(x, c, op="sum"):
    raise NotImplementedError()


def fails_on_mpi_only(x, c, op="sum"):
    if type(c).__name__ == "MPICommunicator":
        raise RuntimeError("only under MPI")
    return ring.ring_allreduce(x, c, op)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_broken_ring_fails_task_6_in_a_sentence(capfd):
    with pytest.raises(CheckFailed, match=r"^Task 6: not done yet"):
        with task("Task 6"):
            check_ring_on_mpi(not_done, 3, 10)
    with pytest.raises(CheckFailed, match=r"^Task 6: .*rank \d raised RuntimeError: only under"):
        with task("Task 6"):
            check_ring_on_mpi(fails_on_mpi_only, 2, 10, block=LIBRARY)
    captured = capfd.readouterr()
    assert "MPI_Abort" not in captured.out + captured.err

