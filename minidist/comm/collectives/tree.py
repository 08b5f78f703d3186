"""Tree allreduces: reduce up a binary tree, broadcast back down; and NCCL's double tree.

A binary tree reaches all P ranks in ``ceil(log2(P+1))`` levels, so an
allreduce costs about ``2 log2 P`` message latencies instead of the ring's
``2(P-1)``. Sent whole, though, the vector would cross every level in turn;
so it is cut into segments and *pipelined*: while a parent reduces segment
k, its children already send segment k+1, and a long vector costs about
``2N`` bytes of time per rank plus the depth of the tree in latencies.

The tree used here is the in-order tree of NCCL 2.4: number the ranks
``1..P`` (rank + 1); node i has height ``h`` = the number of trailing zero
bits of i, its children are ``i - 2^(h-1)`` and ``i + 2^(h-1)``. The leaves
are exactly the even ranks; the interior nodes the odd ones.

One tree is unfair: a leaf sends N and receives N, an interior node moves
3N. The *double tree* runs two trees at once on half of the vector each.
The second tree is the first one mirrored (``r -> P-1-r``, P even) or
shifted by one (``r -> r+1``, P odd), so its interior nodes are the even
ranks: every rank is interior in at most one tree, and the load evens out.

Same bits on every rank: each element is reduced once, at the root of its
tree (in the fixed order own, left child, right child) and then broadcast.
(With two ranks the single tree is one edge, and ``tree_allreduce`` swaps
the vectors across it instead: see there.)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from minidist.comm.collectives.doubling import recursive_doubling_allreduce
from minidist.comm.collectives.ring import pieces
from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator, Request

TAG = Tag.TREE
SEGMENT_BYTES = 1 << 22


@dataclass(frozen=True)
class Tree:
    """A rooted tree over ranks ``0..P-1``: ``parent[r]`` (-1 at the root), ``children[r]``."""

    root: int
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]


@lru_cache(maxsize=64)
def inorder_tree(p: int) -> Tree:
    """NCCL's balanced in-order binary tree over ``p`` ranks (interior nodes: odd ranks)."""
    parent, children = [-1] * p, [[] for _ in range(p)]
    for i in range(1, p + 1):  # 1-based node numbers; rank = i - 1
        height = (i & -i).bit_length() - 1
        if height == 0:
            continue
        for child in (i - (1 << (height - 1)), i + (1 << (height - 1))):
            while child > p:  # beyond the last rank: its left descendant stands in
                child_height = (child & -child).bit_length() - 1
                if child_height == 0:
                    break
                child -= 1 << (child_height - 1)
            if child <= p:
                children[i - 1].append(child - 1)
                parent[child - 1] = i - 1
    return Tree((1 << (p.bit_length() - 1)) - 1, tuple(parent), tuple(map(tuple, children)))


@lru_cache(maxsize=64)
def mirrored_tree(tree: Tree) -> Tree:
    """The complementary tree: mirrored (P even) or shifted by one (P odd)."""
    p = len(tree.parent)
    move = (lambda r: p - 1 - r) if p % 2 == 0 else (lambda r: (r + 1) % p)
    parent, children = [-1] * p, [[] for _ in range(p)]
    for r in range(p):
        parent[move(r)] = -1 if tree.parent[r] < 0 else move(tree.parent[r])
        children[move(r)] = tuple(move(k) for k in tree.children[r])
    return Tree(move(tree.root), tuple(parent), tuple(children))


def reduce_segment(c: Communicator, op: str, tree: Tree, src: np.ndarray, out: np.ndarray,
                   scratch: np.ndarray | None, tag: int) -> list[Request]:
    """One segment up the tree: reduce own + children into ``out``, start passing it up.

    The first child's partial sum lands straight in ``out`` and my own is
    combined into it from ``src`` (own first: no copy of ``src``); the
    second child's lands in ``scratch``.
    """
    rank = c.rank
    if not tree.children[rank] and tree.parent[rank] >= 0:
        # communication: a leaf's own segment, straight to its parent
        return [c.isend(src, tree.parent[rank], tag)]
    for k, child in enumerate(tree.children[rank]):
        first = k == 0 and out is not src
        incoming = out if first else scratch[: len(out)]
        # communication: the child's partial sum of this segment (its whole subtree)
        c.recv(incoming, child, tag)
        if first:
            c.combine(op, out, src, incoming_first=True)
        else:
            c.combine(op, out, incoming)
    if tree.parent[rank] < 0:
        return []
    # communication: my subtree's partial sum of this segment to my parent
    return [c.isend(out, tree.parent[rank], tag)]


def broadcast_segment(c: Communicator, tree: Tree, out: np.ndarray, tag: int) -> list[Request]:
    """One segment down the tree: receive the result from the parent, start passing it on."""
    rank = c.rank
    if tree.parent[rank] >= 0:
        # communication: the final result of this segment from my parent
        c.recv(out, tree.parent[rank], tag)
    # communication: the final result of this segment to each child
    return [c.isend(out, child, tag) for child in tree.children[rank]]


class Plan(NamedTuple):
    """One rank's part of a trees allreduce: the segments ``(tree, lo, hi)`` in its order."""

    up: tuple[tuple[int, int, int], ...]  # reduce phase
    down: tuple[tuple[int, int, int], ...]  # broadcast phase
    scratch: int  # items of the buffer that receives children's segments (0 for a leaf)


@lru_cache(maxsize=1024)
def plan(trees: tuple[Tree, ...], rank: int, n: int, segment: int) -> Plan:
    """Cut ``n`` items into one part per tree and each part into segments of at most
    ``segment`` items; order them for ``rank`` (cached: it depends only on the sizes).

    Within a segment, a rank works first on the trees where it is a leaf
    going up (those sends wait for nothing) and last going down (that
    receive holds up nobody), so that being busy in one tree holds up the
    other tree as little as possible.
    """
    parts = pieces(0, n, len(trees))
    count = [max(1, -(-(hi - lo) // segment)) for lo, hi in parts]
    work = [pieces(lo, hi, k) for (lo, hi), k in zip(parts, count, strict=True)]
    leaf_first = sorted(range(len(trees)), key=lambda t: bool(trees[t].children[rank]))
    leaf_last = sorted(range(len(trees)), key=lambda t: not trees[t].children[rank])
    up = tuple((t, *work[t][k]) for k in range(max(count)) for t in leaf_first if k < count[t])
    down = tuple((t, *work[t][k]) for k in range(max(count)) for t in leaf_last if k < count[t])
    interior = any(tree.children[rank] for tree in trees)
    return Plan(up, down, min(segment, n) if interior else 0)


def trees_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                    trees: list[Tree] | tuple[Tree, ...], segment_bytes: int) -> None:
    """Reduce + broadcast part t of the vector along ``trees[t]``, segments interleaved.

    Sends are non-blocking, so a rank's outgoing link works while it
    receives and adds the next segment; receives block, since the data is
    needed at once. The order of the segments is :func:`plan`'s.
    """
    if c.size == 1:
        if out is not src:
            out[...] = src
        return
    trees = tuple(trees)
    todo = plan(trees, c.rank, len(src), max(1, segment_bytes // src.itemsize))
    scratch = c.scratch(todo.scratch, src.dtype) if todo.scratch else None
    # 1. reduce: segment by segment, each tree in turn, up to the roots
    sending = []
    for t, lo, hi in todo.up:
        segment = out[lo:hi]
        own = segment if src is out else src[lo:hi]  # one object when in place
        sending += reduce_segment(c, op, trees[t], own, segment, scratch, TAG + t)
    for request in sending:  # the broadcast will overwrite these segments
        request.wait()
    # 2. broadcast: the same segments down from the roots
    sending = []
    for t, lo, hi in todo.down:
        sending += broadcast_segment(c, trees[t], out[lo:hi], TAG + t)
    for request in sending:
        request.wait()


def tree_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                   segment_bytes: int = SEGMENT_BYTES) -> None:
    """Allreduce along one in-order binary tree, pipelined in segments.

    Cost, depth D, S segments of N bytes in all: an interior rank receives 2
    and sends 1 message per segment going up, then receives 1 and sends 2
    going down (fan-in 2); bytes sent per rank: N (leaf), 3N (interior),
    2N (root). Time: about ``2D`` message times to fill and drain the
    pipeline, then per segment two messages on the busiest link each way:
    ``(2D + 4S)(alpha + beta N/S) + 2 gamma N`` roughly
    (``cost.tree_cost`` steps the pipeline exactly).

    Two ranks make a tree of one edge: reducing up it, then broadcasting back
    down, would cross it twice in turn. Both ends swap their vectors and
    both reduce instead (rank 0's first, so the bits agree): one exchange,
    the same bytes and half the latency, which is recursive doubling at P = 2.
    """
    if c.size == 2:
        recursive_doubling_allreduce(src, out, c, op)
        return
    trees_allreduce(src, out, c, op, [inorder_tree(c.size)], segment_bytes)


def double_tree_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                          segment_bytes: int = SEGMENT_BYTES) -> None:
    """Allreduce along two complementary trees, half of the vector each (NCCL 2.4).

    Cost: a rank interior in one tree and a leaf in the other sends
    ``3 N/2`` there and ``N/2`` here, about 2N instead of a single tree's
    3N, and receives at most 2 messages per segment (fan-in 2); latency as
    one tree, ``2 log2 P`` levels. NCCL gets near-ring bandwidth by letting
    each tree progress on its own channel; here one thread serves both in
    turn with blocking receives, so a rank busy in one tree can delay the
    other. For long vectors the model (``cost.double_tree_cost``) gives, in
    units of ``N beta``: P = 4: tree 4, double tree 3, ring 1.5; P = 8:
    4, 4.5 and 1.75.
    """
    first = inorder_tree(c.size)
    trees_allreduce(src, out, c, op, [first, mirrored_tree(first)], segment_bytes)
