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
the lower-ranked side first.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from minidist.comm.communicator import Communicator

TAG = 31


def _combine_lower_first(combine: Callable[[np.ndarray, np.ndarray], None], mine: np.ndarray,
                         theirs: np.ndarray, mine_is_lower: bool) -> np.ndarray:
    """Combine two vectors, the lower rank's first; returns the buffer holding the result."""
    if mine_is_lower:
        combine(mine, theirs)
        return mine
    combine(theirs, mine)
    return theirs


def recursive_doubling_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                                 combine: Callable[[np.ndarray, np.ndarray], None] | None = None
                                 ) -> None:
    """Allreduce ``src`` into ``out`` (1-D, same length; ``out`` may be ``src``).

    ``combine(acc, incoming)``, if given, replaces ``c.combine(op, acc,
    incoming)`` (the agreement check reduces packets of two dtypes with it).

    Cost, ``P' = 2^floor(log2 P)``, ``r = P - P'``, N bytes:
    ``log2 P'`` rounds (plus 2 when ``r > 0``); every rank of the doubling
    sends ``N`` bytes per round (the odd ranks below ``2r`` one more N, back
    to their even neighbour); fan-in 1 per round (2 on a folding odd rank);
    time ``log2 P' (alpha + N beta + N gamma)`` plus ``2 (alpha + N beta) +
    N gamma`` when folding.
    """
    rank, p = c.rank, c.size
    if out is not src:
        out[...] = src
    if p == 1:
        return
    pof2 = 1 << (p.bit_length() - 1)
    extra = p - pof2
    combine = combine or partial(c.combine, op)
    acc, scratch = out, np.empty_like(out)

    # 1. fold: even ranks below 2*extra give their vector to the odd neighbour
    if rank < 2 * extra:
        if rank % 2 == 0:
            # communication: my whole vector to rank+1, who reduces for both of us
            c.send(acc, rank + 1, TAG)
            new_rank = -1
        else:
            # communication: the even neighbour's whole vector
            c.recv(scratch, rank - 1, TAG)
            acc, scratch = _combine_lower_first(combine, acc, scratch, False), acc
            new_rank = rank // 2
    else:
        new_rank = rank - extra

    # 2. doubling: in round k, swap with the partner whose new rank differs in bit k
    if new_rank >= 0:
        mask = 1
        while mask < pof2:
            partner_new = new_rank ^ mask
            partner = 2 * partner_new + 1 if partner_new < extra else partner_new + extra
            # communication: my partial result out, the partner's partial result in
            c.sendrecv(acc, partner, scratch, partner, TAG, TAG)
            result = _combine_lower_first(combine, acc, scratch, rank < partner)
            acc, scratch = result, (scratch if result is acc else acc)
            mask <<= 1

    # 3. unfold: odd ranks below 2*extra give the result back to their even neighbour
    if rank < 2 * extra:
        if rank % 2 == 1:
            # communication: the final result back to the rank that sat out
            c.send(acc, rank - 1, TAG)
        else:
            # communication: the final result from rank+1
            c.recv(out, rank + 1, TAG)
            return
    if acc is not out:
        out[...] = acc
