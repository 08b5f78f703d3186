"""Broadcast, reduce, gather, scatter, allgather, reduce-scatter, alltoall, barrier (Lab 2),
and the all-to-all with variable counts that expert parallelism needs (Lecture 7).

Each is written first as the lesson, with ``send``/``recv`` on the default
tag as Lab 2 teaches it: ``broadcast_linear``, ``broadcast_binomial`` and
``reduce_binomial`` *are* the lab's answers (a test keeps them the same).
Ranks are numbered relative to the root, ``me = (rank - root) % P``; a ring
sends to ``rank + 1`` and receives from ``rank - 1``. With P ranks and N
bytes: a *linear* schedule costs P-1 rounds at the root; a *binomial tree*
doubles the ranks that hold the data each round, ``ceil(log2 P)`` rounds; a
*ring* moves ``(P-1)/P·N`` per rank in P-1 rounds of fan-in 1.

The library's own ``comm.broadcast`` and the others (``checked.py``) run
these lessons after the agreement check, on a communicator of their own.
Every lesson returns a new array and accepts any world size, any length
and the dtypes of ``comm/ops.py``.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.transport.communicator import Communicator
from minidist.util.parts import chunk_bounds


def broadcast_linear(arr: np.ndarray, c: Communicator, root: int = 0) -> np.ndarray:
    """The root's ``arr`` on every rank: the root sends to each rank in turn.

    Cost: the root sends P-1 messages of N bytes one after the other on its
    one link: P-1 rounds, time (P-1)(α + βN).
    """
    out = arr.copy()
    if c.rank == root:
        for dest in range(c.size):
            if dest != root:
                # communication: the whole array from the root to rank `dest`
                c.send(out, dest)
    else:
        # communication: the root's array, straight into `out`
        c.recv(out, root)
    return out


def broadcast_binomial(arr: np.ndarray, c: Communicator, root: int = 0) -> np.ndarray:
    """The root's ``arr`` on every rank along a binomial tree: ceil(log2 P) rounds.

    In round k (distance 2^k) every relative rank ``me < 2^k`` sends to
    ``me + 2^k``; a rank receives once, from ``me`` minus its highest set bit.
    Cost: ``ceil(log2 P)`` rounds, P-1 messages of N bytes in all, each rank
    receives N once; the root sends ``ceil(log2 P)`` of them.
    """
    out = arr.copy()
    p = c.size
    me = (c.rank - root) % p  # my rank relative to the root
    distance = 1
    while distance < p:  # round k: distance = 2^k
        if me < distance and me + distance < p:
            # communication: the array to relative rank me + 2^k, who has not got it yet
            c.send(out, (c.rank + distance) % p)
        elif distance <= me < 2 * distance:
            # communication: the array from relative rank me - 2^k (my highest set bit)
            c.recv(out, (c.rank - distance) % p)
        distance *= 2
    return out


def reduce_binomial(arr: np.ndarray, c: Communicator, root: int = 0,
                    op: str = "sum") -> np.ndarray | None:
    """The reduction of every rank's ``arr`` on the root (None elsewhere), up a binomial tree.

    A broadcast run backwards: in round k a rank whose bit k is set sends its
    partial result to ``me - 2^k`` and is done; one whose bits 0..k are clear
    receives from ``me + 2^k`` and combines. Cost: ``ceil(log2 P)`` rounds,
    each rank but the root sends N once; the root receives up to ``ceil(log2 P)``.
    """
    p = c.size
    me = (c.rank - root) % p
    total, incoming = arr.copy(), np.empty_like(arr)
    distance = 1
    while distance < p:
        if me & distance:
            # communication: my subtree's partial result to my parent; then I am done
            c.send(total, (c.rank - distance) % p)
            return None
        if me + distance < p:
            # communication: a child's partial result, combined into mine
            c.recv(incoming, (c.rank + distance) % p)
            c.combine(op, total, incoming)
        distance *= 2
    return total


def gather_linear(arr: np.ndarray, c: Communicator, root: int = 0) -> np.ndarray | None:
    """Every rank's ``arr`` stacked on the root, shape ``(P, *arr.shape)``; None elsewhere.

    Cost: the root receives N from each rank in turn: P-1 rounds, fan-in P-1.
    """
    if c.rank != root:
        # communication: my array to the root
        c.send(arr, root)
        return None
    out = np.empty((c.size, *arr.shape), arr.dtype)
    for source in range(c.size):
        if source == root:
            out[source] = arr
        else:
            # communication: rank `source`'s array, straight into its row
            c.recv(out[source], source)
    return out


def scatter_linear(arr: np.ndarray, c: Communicator, root: int = 0) -> np.ndarray:
    """Row ``rank`` of the root's ``arr`` (shape ``(P, ...)``), on every rank.

    Cost: the root sends one row (N/P) to each rank in turn: P-1 rounds.
    """
    if c.rank == root:
        for dest in range(c.size):
            if dest != root:
                # communication: row `dest` of the root's array to rank `dest`
                c.send(arr[dest], dest)
        return arr[root].copy()
    out = np.empty(arr.shape[1:], arr.dtype)
    # communication: my row, from the root
    c.recv(out, root)
    return out


def allgather_ring(arr: np.ndarray, c: Communicator) -> np.ndarray:
    """Every rank's ``arr`` stacked, on every rank: shape ``(P, *arr.shape)``.

    In step s rank r passes row ``r - s`` to the right (its own first) and
    receives row ``r - s - 1`` from the left: Lab 3's allgather phase.
    Cost: P-1 rounds; each rank sends and receives (P-1)N, fan-in 1.
    """
    p, me = c.size, c.rank
    right, left = (me + 1) % p, (me - 1) % p
    out = np.empty((p, *arr.shape), arr.dtype)
    out[me] = arr
    for step in range(p - 1):
        # communication: a row to the right, the next one from the left into place, at once
        c.sendrecv(out[(me - step) % p], right, out[(me - step - 1) % p], left)
    return out


def reduce_scatter_ring(arr: np.ndarray, c: Communicator, op: str = "sum") -> np.ndarray:
    """Chunk ``rank`` (``chunk_bounds(n, P)[rank]``) of the reduction of the 1-D ``arr``.

    Lab 3's reduce-scatter phase, each rank starting one chunk earlier so
    that rank r ends with chunk r: in step s rank r sends its partial chunk
    ``r - s - 1`` to the right and combines chunk ``r - s - 2`` from the left
    into its own. Cost: P-1 rounds; each rank sends and receives (P-1)/P·N
    (every chunk, even an empty one), fan-in 1.
    """
    p, me = c.size, c.rank
    right, left = (me + 1) % p, (me - 1) % p
    bounds = chunk_bounds(len(arr), p)
    partial = arr.copy()
    incoming = c.scratch(max(hi - lo for lo, hi in bounds), arr.dtype)
    for step in range(p - 1):
        s_lo, s_hi = bounds[(me - step - 1) % p]
        r_lo, r_hi = bounds[(me - step - 2) % p]
        received = incoming[: r_hi - r_lo]
        # communication: a partial chunk to the right, another from the left, at once
        c.sendrecv(partial[s_lo:s_hi], right, received, left)
        c.combine(op, partial[r_lo:r_hi], received)
    lo, hi = bounds[me]
    return partial[lo:hi].copy()


def alltoall_pairwise(arr: np.ndarray, c: Communicator) -> np.ndarray:
    """Row j of every rank's ``arr`` (shape ``(P, ...)``) goes to rank j: ``out[i]`` is rank i's.

    Round s is a ring shift by s: rank r sends row ``r + s`` to rank ``r + s``
    and receives its row from rank ``r - s``. Cost: P-1 rounds, (P-1)/P·N
    bytes each way per rank, fan-in 1.
    """
    p, me = c.size, c.rank
    out = np.empty_like(arr)
    out[me] = arr[me]
    for step in range(1, p):
        dest, source = (me + step) % p, (me - step) % p
        # communication: my row for `dest` out, `source`'s row for me in, at once
        c.sendrecv(arr[dest], dest, out[source], source)
    return out


def alltoallv_pairwise(arr: np.ndarray, counts: np.ndarray, c: Communicator
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The all-to-all with variable counts (``MPI_Alltoallv``): this rank's first
    ``counts[0]`` rows of ``arr`` go to rank 0, the next ``counts[1]`` to rank 1, and so on.
    Returns the rows every rank sent here, rank 0's block first, and their counts.

    1. counts: an alltoall of one integer per pair of ranks, since a rank must know
       how many rows will come before it can make room for them;
    2. rows: round s is a ring shift by s, as in :func:`alltoall_pairwise`: rank r
       sends its block for ``r + s`` and receives the block of ``r - s`` (either may
       be empty).

    Cost: 2(P-1) rounds, fan-in 1: P-1 of 8 bytes, then P-1 of blocks. Rank r sends
    ``8(P-1) + Σ_{j≠r} counts[j]·R`` bytes (R: the bytes of a row) and receives the
    same sum over the counts addressed to it.
    """
    p, me = c.size, c.rank
    # 1. counts: recv_counts[i] rows will come from rank i
    recv_counts = alltoall_pairwise(counts.reshape(p, 1), c).reshape(p)
    send_at = np.concatenate(([0], np.cumsum(counts)))  # block j is arr[send_at[j]:send_at[j+1]]
    recv_at = np.concatenate(([0], np.cumsum(recv_counts)))
    out = np.empty((int(recv_at[-1]), *arr.shape[1:]), arr.dtype)
    out[recv_at[me]:recv_at[me + 1]] = arr[send_at[me]:send_at[me + 1]]
    # 2. rows
    for step in range(1, p):
        dest, source = (me + step) % p, (me - step) % p
        # communication: my block for `dest` out, `source`'s block for me in, at once
        c.sendrecv(arr[send_at[dest]:send_at[dest + 1]], dest,
                   out[recv_at[source]:recv_at[source + 1]], source)
    return out, recv_counts


def barrier_dissemination(c: Communicator) -> None:
    """In round k, signal ``rank + 2^k`` and wait for ``rank - 2^k``: after round k a rank
    has heard, directly or not, from the ``2^(k+1) - 1`` ranks before it.

    Cost: ``ceil(log2 P)`` rounds of one empty message each.
    """
    token, incoming = np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    distance = 1
    while distance < c.size:  # round k: distance = 2^k
        # communication: an empty message, "I and all I heard from have arrived"
        c.sendrecv(token, (c.rank + distance) % c.size, incoming, (c.rank - distance) % c.size)
        distance *= 2
