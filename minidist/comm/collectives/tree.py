"""Tree allreduces: reduce up a binary tree, broadcast back down (Lab 3, Task 4); the double tree.

The tree is the heap's: rank r's children are ``2r+1`` and ``2r+2`` (those
< P), its parent ``(r-1)//2``, rank 0 the root. Its depth is
``floor(log2 P)``, so an allreduce costs about ``4 log2 P`` message times
instead of the ring's ``2(P-1)``, but the whole vector crosses every edge
twice and an interior rank sends 3N: good for short vectors, bad for long
ones.

One tree is unfair: a leaf sends N, an interior rank 3N. NCCL's *double
tree* gives each half of the vector its own tree, the second one the
mirror image of the first (rank r stands where rank ``P-1-r`` stood): the
interior ranks of one tree are leaves of the other, so no rank sends much
more than 2N.

Same bits on every rank: each element is reduced once, on its way up to
the root, then copied down.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.transport.communicator import Communicator
from minidist.util import chunk_bounds


def tree_allreduce(x: np.ndarray, c: Communicator, op: str = "sum") -> np.ndarray:
    """Reduce ``x`` over all ranks of ``c`` in place, up and down the heap tree; returns ``x``.

    tree: 2(P-1) messages of N bytes in all, one per edge and direction; a
    rank sends N per child and N to its parent (interior: 3N), receives at
    most 3 (fan-in 2 going up); depth ``D = floor(log2 P)``, at most 4D
    rounds; time, full tree, ``D (4(alpha + beta N) + 2 gamma N)``
    (``cost.tree_cost`` steps any P through the tree exactly).

    1. reduce up: a rank receives the partial result of child 2r+1, then of
       child 2r+2, reduces each into its own, and sends the result to its
       parent;
    2. broadcast down: the root now holds the result; each rank receives it
       from its parent and sends it to its children, 2r+1 first.
    """
    me = c.rank
    parent = (me - 1) // 2
    children = [k for k in (2 * me + 1, 2 * me + 2) if k < c.size]
    incoming = c.scratch(len(x), x.dtype)
    # 1. reduce up: my children's partial results into mine, then mine to my parent
    for child in children:
        # communication: the partial result of the child's subtree
        c.recv(incoming, child)
        c.combine(op, x, incoming)
    if me > 0:
        # communication: my subtree's partial result, up
        c.send(x, parent)
        # 2. broadcast down (the root holds the result already)
        # communication: the final result, from my parent
        c.recv(x, parent)
    for child in children:
        # communication: the final result, on to my children
        c.send(x, child)
    return x


def double_tree_allreduce(x: np.ndarray, c: Communicator, op: str = "sum") -> np.ndarray:
    """Reduce ``x`` in place along two trees, half of the vector each; returns ``x``.

    double_tree: two ``tree_allreduce`` of N/2 bytes; a rank interior in one
    tree is a leaf in the other, so it sends at most ``3N/2 + N/2 = 2N``
    (P odd: the middle rank is a leaf in both); 2(P-1) messages per tree.
    Here the two trees run one after the other, each rank starting the
    second as soon as it is done with the first (NCCL runs them at once, on
    separate channels): about ``4D`` message times on N/2 bytes per tree
    (``cost.double_tree_cost`` steps both exactly).

    1. the first half along the heap tree (root: rank 0);
    2. the second half along its mirror image (root: rank P-1).
    """
    (lo, mid), (_, hi) = chunk_bounds(len(x), 2)
    # 1. the heap tree
    tree_allreduce(x[lo:mid], c, op)
    # 2. the mirrored tree: the same code, with rank r standing where rank P-1-r stood
    tree_allreduce(x[mid:hi], Mirrored(c), op)
    return x


class Mirrored:
    """``c`` seen in a mirror: rank r is called ``P-1-r``, in this rank's and its peers' numbers.

    Only what ``tree_allreduce`` uses: ``rank``, ``size``, ``send``,
    ``recv``, ``scratch`` and ``combine``.
    """

    def __init__(self, c: Communicator) -> None:
        self.c, self.size, self.rank = c, c.size, c.size - 1 - c.rank

    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        self.c.send(buf, self.size - 1 - dest, tag)

    def recv(self, buf: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        return self.c.recv(buf, self.size - 1 - source, tag)

    def scratch(self, n: int, dtype: np.dtype) -> np.ndarray:
        return self.c.scratch(n, dtype)

    def combine(self, op: str, acc: np.ndarray, incoming: np.ndarray) -> None:
        self.c.combine(op, acc, incoming)
