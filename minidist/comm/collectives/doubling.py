"""Recursive doubling: the latency-optimal allreduce (MPICH's choice for short vectors).

In round k every rank swaps its *whole* vector with the partner whose rank
differs in bit k, and both combine. After round k each rank holds the
reduction of a block of ``2^(k+1)`` ranks, so ``log2 P`` rounds suffice:
the fewest possible, at the price of sending all N bytes every round.

P is rarely a power of two, so first *fold* the extra ranks in: with
``P' = 2^floor(log2 P)`` and ``r = P - P'``, each even rank below ``2r``
hands its vector to its odd neighbour and sits out; the ``P'`` remaining
ranks run the doubling; at the end the odd ranks hand the result back.

Same bits on every rank: in each round both partners combine the same two
vectors. IEEE ``a + b`` and ``b + a`` round identically, but ``max(+0.0,
-0.0)`` and NaN payloads depend on the operand order, so every rank puts
the lower-ranked side first (``c.combine(..., incoming_first=True)`` when
the vector that arrived is the lower rank's).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator

TAG = Tag.RECURSIVE_DOUBLING


def receive_and_combine(c: Communicator, combine: Callable[[np.ndarray, np.ndarray, bool], None],
                        mine: np.ndarray, out: np.ndarray, scratch: np.ndarray | None,
                        partner: int, send: bool) -> np.ndarray:
    """The partner's partial result in, combined with ``mine`` into ``out``, the lower
    rank's first; returns ``out``, now my partial result.

    While ``mine`` is still ``src``, the partner's vector lands straight in
    ``out`` (no copy of ``src``); after that, in ``scratch``.
    """
    theirs = out if mine is not out else scratch
    if send:
        # communication: my partial result out, the partner's partial result in
        c.sendrecv(mine, partner, theirs, partner, TAG, TAG)
    else:
        # communication: the even neighbour's whole vector (it sits the doubling out)
        c.recv(theirs, partner, TAG)
    if theirs is out:
        combine(out, mine, c.rank < partner)
    else:
        combine(out, scratch, partner < c.rank)
    return out


def recursive_doubling_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                                 combine: Callable[[np.ndarray, np.ndarray, bool], None] | None
                                 = None, scratch: np.ndarray | None = None) -> None:
    """Allreduce ``src`` into ``out`` (1-D, same length; ``out`` may be ``src``).

    ``combine(acc, incoming, incoming_first)``, if given, replaces
    ``c.combine(op, acc, incoming, incoming_first=...)`` (the agreement check
    reduces packets of two dtypes with it); ``scratch``, if given, receives
    the partner's vectors (else one is taken from ``c.scratch``).

    No copy of the vector is made: the first partial result from a partner
    lands straight in ``out`` and ``src`` is combined into it (when ``out``
    is not ``src``); later ones land in ``scratch``.

    Cost, ``P' = 2^floor(log2 P)``, ``r = P - P'``, N bytes:
    ``log2 P'`` rounds (plus 2 when ``r > 0``); every rank of the doubling
    sends ``N`` bytes per round (the odd ranks below ``2r`` one more N, back
    to their even neighbour); fan-in 1 per round (2 on a folding odd rank);
    time ``log2 P' (alpha + N beta + N gamma)`` plus ``2 (alpha + N beta) +
    N gamma`` when folding.
    """
    rank, p = c.rank, c.size
    if p == 1:
        if out is not src:
            out[...] = src
        return
    pof2 = 1 << (p.bit_length() - 1)
    extra = p - pof2
    combine = combine or partial(c.combine, op)
    if scratch is None and (out is src or p > 2):  # P = 2 out of place: out suffices
        scratch = c.scratch(len(out), out.dtype)
    mine = src  # my partial result: src until the first combine leaves it in out

    # 1. fold: even ranks below 2*extra give their vector to the odd neighbour
    if rank < 2 * extra:
        if rank % 2 == 0:
            # communication: my whole vector to rank+1, who reduces for both of us
            c.send(src, rank + 1, TAG)
            new_rank = -1
        else:
            mine = receive_and_combine(c, combine, mine, out, scratch, rank - 1, send=False)
            new_rank = rank // 2
    else:
        new_rank = rank - extra

    # 2. doubling: in round k, swap with the partner whose new rank differs in bit k
    if new_rank >= 0:
        mask = 1
        while mask < pof2:
            partner_new = new_rank ^ mask
            partner = 2 * partner_new + 1 if partner_new < extra else partner_new + extra
            mine = receive_and_combine(c, combine, mine, out, scratch, partner, send=True)
            mask <<= 1

    # 3. unfold: odd ranks below 2*extra give the result back to their even neighbour
    if rank < 2 * extra:
        if rank % 2 == 1:
            # communication: the final result back to the rank that sat out
            c.send(out, rank - 1, TAG)
        else:
            # communication: the final result from rank+1
            c.recv(out, rank + 1, TAG)
