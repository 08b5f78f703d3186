"""Recursive doubling: the latency-optimal allreduce (MPICH's choice for short vectors).

In round k every rank swaps its *whole* vector with the partner whose rank
differs in bit k, and both reduce. After round k each rank holds the
reduction over a block of ``2^(k+1)`` ranks, so ``log2 P`` rounds suffice:
the fewest possible, at the price of sending all N bytes every round.

P is rarely a power of two, so first *fold* the extra ranks in: with
``P' = 2^floor(log2 P)`` and ``e = P - P'``, each even rank below ``2e``
hands its vector to its odd neighbour and sits out; the ``P'`` remaining
ranks run the doubling; at the end the odd ranks hand the result back.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.transport.communicator import Communicator


def recursive_doubling_allreduce(x: np.ndarray, c: Communicator, op: str = "sum") -> np.ndarray:
    """Reduce ``x`` over all ranks of ``c`` in place, by recursive doubling; returns ``x``.

    recursive_doubling: ``L = log2 P'`` rounds (2 more when ``e > 0``); a
    rank of the doubling sends N per round (an odd rank below 2e one N
    more, back to its neighbour), fan-in 1; time ``L (alpha + beta N +
    gamma N)``, plus ``2(alpha + beta N) + gamma N`` when folding.

    1. fold: even ranks below 2e send their vector to the odd neighbour,
       which reduces it into its own;
    2. doubling: the ``P'`` others, renumbered 0..P'-1, swap with the partner
       whose new number differs in bit k, in round k, and reduce;
    3. unfold: odd ranks below 2e send the result back to the even neighbour.

    Same bits on every rank: in each round both partners reduce the same two
    vectors, and put the lower rank's first (``incoming_first``): IEEE
    ``a + b`` and ``b + a`` round alike, but ``max(+0.0, -0.0)`` and NaN
    payloads depend on the order.
    """
    p, me = c.size, c.rank
    pof2 = 1 << (p.bit_length() - 1)
    extra = p - pof2
    incoming = c.scratch(len(x), x.dtype)
    # 1. fold: even ranks below 2 * extra give their vector to the odd neighbour
    if me < 2 * extra and me % 2 == 0:
        # communication: my whole vector to rank me + 1, who reduces for both of us
        c.send(x, me + 1)
    else:
        if me < 2 * extra:
            # communication: the even neighbour's whole vector
            c.recv(incoming, me - 1)
            c.combine(op, x, incoming)
        new_rank = me // 2 if me < 2 * extra else me - extra
        # 2. doubling: in round k, swap with the partner whose new rank differs in bit k
        mask = 1
        while mask < pof2:
            partner_new = new_rank ^ mask
            partner = 2 * partner_new + 1 if partner_new < extra else partner_new + extra
            # communication: my partial result out, the partner's in
            c.sendrecv(x, partner, incoming, partner)
            c.combine(op, x, incoming, incoming_first=partner < me)
            mask <<= 1
    # 3. unfold: odd ranks below 2 * extra give the result back to their even neighbour
    if me < 2 * extra:
        if me % 2 == 1:
            # communication: the final result back to the rank that sat out
            c.send(x, me - 1)
        else:
            # communication: the final result from rank me + 1
            c.recv(x, me + 1)
    return x
