"""Ring allreduce: the bandwidth-optimal allreduce, as reduce-scatter + allgather.

Cut the vector into P chunks and arrange the ranks in a ring, each sending
only to its right neighbour and receiving only from its left.

1. Reduce-scatter, P-1 steps: in each step every rank passes one chunk of
   partial sums to the right and adds the chunk arriving from the left into
   its own. A chunk travels once around the ring, collecting one
   contribution per hop; after P-1 steps rank i holds chunk i fully reduced.
2. Allgather, P-1 steps: the reduced chunks travel once more around the ring,
   now copied instead of added.

Each rank sends ``2(P-1)`` chunks of ``N/P``: ``2(P-1)/P·N`` bytes, which
no allreduce can beat as P grows, and every link carries the same load
(fan-in 1). The price is ``2(P-1)`` rounds of latency, which makes the ring
the wrong choice for short vectors.

Same bits on every rank: each chunk is reduced by exactly one chain of
additions, then *copied* around the ring, so all ranks hold identical bits.

Speed: no copy of the input is made. The reduce-scatter receives straight
into the output and adds the local chunk there (``out = incoming op mine``,
numpy's ``out=``, no temporary); only an in-place call (``out is src``)
needs a scratch buffer. ``segment_bytes`` cuts each chunk into pieces sent
one after the other, which pays where a network card moves the bytes while
the CPU adds the previous piece. On one host MPI's shared memory is copied
by the CPUs themselves, and fewer, larger messages won: at P = 2 on the
course's 2-core machine a 64 MiB ring took 13.0 ms unsegmented, 13.5 ms in
4 MiB pieces and 14.9 ms in 256 KiB pieces when the machine was quiet
(47, 70 and 100 ms under a heavy load). So by default a chunk is one
message.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator

TAG = Tag.RING
SEGMENT_BYTES = 1 << 30


def chunk_bounds(n: int, p: int) -> list[tuple[int, int]]:
    """Split ``range(n)`` into ``p`` contiguous chunks; the first ``n % p`` are one longer."""
    base, longer = divmod(n, p)
    bounds, start = [], 0
    for k in range(p):
        stop = start + base + (1 if k < longer else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def pieces(start: int, stop: int, count: int) -> list[tuple[int, int]]:
    """``[start, stop)`` cut into ``count`` contiguous pieces (balanced, maybe empty)."""
    return [(start + lo, start + hi) for lo, hi in chunk_bounds(stop - start, count)]


def segment_count(bounds: list[tuple[int, int]], segment: int) -> int:
    """How many pieces every chunk is cut into so that none exceeds ``segment`` items."""
    longest = max(hi - lo for lo, hi in bounds)
    return max(1, -(-longest // segment))


def ring_reduce_scatter(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                        bounds: list[tuple[int, int]], segment: int) -> None:
    """Phase 1: afterwards ``out[bounds[rank]]`` holds chunk ``rank`` reduced over all ranks.

    Other chunks of ``out`` hold partial results. P-1 steps; in step s rank i
    sends chunk ``i-s-1`` and receives chunk ``i-s-2`` (mod P).
    """
    rank, p = c.rank, c.size
    right, left = (rank + 1) % p, (rank - 1) % p
    count = segment_count(bounds, segment)
    scratch = c.scratch(-(-max(hi - lo for lo, hi in bounds) // count), out.dtype) \
        if out is src else None
    for step in range(p - 1):
        sending = src if step == 0 else out
        send_pieces = pieces(*bounds[(rank - step - 1) % p], count)
        recv_pieces = pieces(*bounds[(rank - step - 2) % p], count)
        for (s_lo, s_hi), (r_lo, r_hi) in zip(send_pieces, recv_pieces, strict=True):
            if scratch is None:
                # communication: my partial chunk to the right, the left's partial chunk
                # straight into the output, where my own contribution is then added
                c.sendrecv(sending[s_lo:s_hi], right, out[r_lo:r_hi], left, TAG, TAG)
                c.combine(op, out[r_lo:r_hi], src[r_lo:r_hi])
            else:
                # communication: the same, through a scratch buffer (in place: out is src)
                incoming = scratch[: r_hi - r_lo]
                c.sendrecv(sending[s_lo:s_hi], right, incoming, left, TAG, TAG)
                c.combine(op, out[r_lo:r_hi], incoming)


def ring_allgather(out: np.ndarray, c: Communicator, bounds: list[tuple[int, int]],
                   segment: int) -> None:
    """Phase 2: rank i starts with chunk i of ``out`` final and ends with all of them.

    P-1 steps; in step s rank i sends chunk ``i-s`` and receives chunk ``i-s-1``.
    """
    rank, p = c.rank, c.size
    right, left = (rank + 1) % p, (rank - 1) % p
    count = segment_count(bounds, segment)
    for step in range(p - 1):
        send_pieces = pieces(*bounds[(rank - step) % p], count)
        recv_pieces = pieces(*bounds[(rank - step - 1) % p], count)
        for (s_lo, s_hi), (r_lo, r_hi) in zip(send_pieces, recv_pieces, strict=True):
            # communication: a reduced chunk to the right, another from the left (copied)
            c.sendrecv(out[s_lo:s_hi], right, out[r_lo:r_hi], left, TAG, TAG)


def ring_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                   segment_bytes: int = SEGMENT_BYTES) -> None:
    """Allreduce ``src`` into ``out`` (1-D, same length; ``out`` may be ``src``).

    Cost, N bytes, chunks of ``N/P`` cut into S pieces of at most
    ``segment_bytes`` (S = 1 by default): ``2(P-1)`` steps of S messages,
    ``2(P-1)/P·N`` bytes sent and received per rank, fan-in 1; time
    ``2(P-1)(S alpha + N/P beta) + (P-1)/P·N gamma``.
    """
    if c.size == 1:
        if out is not src:
            out[...] = src
        return
    bounds = chunk_bounds(len(src), c.size)
    segment = max(1, segment_bytes // src.itemsize)
    # 1. reduce-scatter
    ring_reduce_scatter(src, out, c, op, bounds, segment)
    # 2. allgather
    ring_allgather(out, c, bounds, segment)
