"""The heap tree of ``tree_allreduce``, as the cost model walks it: its shape and its clocks.

A position's children; the most transfers one level takes at once (for the
shared memory bus, ``model.STREAMS``); and every rank's clock after an
allreduce up and down the tree, stepped with the in-process transport's
rules. ``model.py`` prices the trees with them (``tree_cost``,
``double_tree_cost``); they are apart because they walk the schedule step by
step, where the other algorithms' costs are closed forms. A tree's ranks do
not start together after the agreement check when P is not a power of two
(the ranks folded into recursive doubling leave it one message later), so
the check's per-rank clocks are here too (:func:`doubling_clocks`).
"""

from __future__ import annotations

from minidist.comm.cost.network import NetworkModel


def _children(q: int, p: int) -> list[int]:
    """The heap tree's children of position q, as ``tree_allreduce`` numbers them."""
    return [k for k in (2 * q + 1, 2 * q + 2) if k < p]


def tree_clocks(p: int, nbytes: int, net: NetworkModel, start: list[float],
                mirrored: bool = False) -> list[float]:
    """Each rank's clock after ``tree_allreduce`` on ``nbytes``, from clocks ``start``.

    The transport's rules, stepped through the heap tree (``mirrored``: its
    mirror image, rank r at position ``P-1-r``). Every operation blocks, so
    a rank's links are free whenever it starts one: a receive ends ``m`` after
    both the sender started and the receiver got there; a send holds the
    sender for ``m``.
    """
    m, r = net.message_time(nbytes), net.reduce_time(nbytes)
    rank = (lambda q: p - 1 - q) if mirrored else (lambda q: q)  # the rank at position q
    t = [start[rank(q)] for q in range(p)]
    sent = [0.0] * p  # when position q's message to its parent (later: from it) started
    for q in reversed(range(p)):  # 1. reduce up: children before parents
        for child in _children(q, p):
            t[q] = max(t[q], sent[child]) + m + r
        if q > 0:
            sent[q], t[q] = t[q], t[q] + m
    for q in range(p):  # 2. broadcast down: parents before children
        if q > 0:
            t[q] = max(t[q], sent[q]) + m
        for child in _children(q, p):
            sent[child], t[q] = t[q], t[q] + m
    return [t[rank(k)] for k in range(p)]  # rank(rank(k)) = k


def doubling_clocks(p: int, nbytes: int, reduced: int, net: NetworkModel) -> list[float]:
    """Each rank's clock after ``recursive_doubling_allreduce`` of ``nbytes`` (``reduced``
    bytes combined a round), all starting at 0: the fold takes m + r on the odd ranks below
    2e; every round of the doubling sets both partners to the later one's clock + m + r,
    so after log2 P' rounds every rank of it is at the latest start + L (m + r); the
    unfold adds m on the ranks below 2e (the even ones waited since their fold)."""
    m, r = net.message_time(nbytes), net.reduce_time(reduced)
    pof2 = 1 << (p.bit_length() - 1)
    extra, steps = p - pof2, pof2.bit_length() - 1
    doubled = (m + r if extra else 0.0) + steps * (m + r)
    return [doubled + m if rank < 2 * extra else doubled for rank in range(p)]


def _widest_tree_level(p: int) -> int:
    """Most transfers at once in the heap tree: the left children of its widest level
    (a parent takes its children in turn), received and reduced together."""
    return max((sum(q % 2 for q in range((1 << d) - 1, min(2 << d, p + 1) - 1))
                for d in range(1, p.bit_length())), default=1)
