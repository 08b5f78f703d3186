"""Time of segments pipelined through binary trees: the tree allreduces' cost model.

A segmented tree allreduce has no short closed form: segment k climbs the
tree while segment k+1 follows one level behind, and every link serves one
message at a time. :func:`pipeline_time` steps every segment through the
tree with the in-process transport's clock rules (``transport/local.py``),
so that ``comm.cost`` predicts exactly what the transport's clock reaches.
"""

from __future__ import annotations

from minidist.comm.collectives.tree import Tree
from minidist.comm.cost.network import NetworkModel


def pipeline_time(p: int, schedule: list[list[tuple[Tree, int]]], net: NetworkModel) -> float:
    """Step every segment up its tree then down, in each rank's program order.

    ``schedule[k]``: segment k of each tree, as (tree, bytes). Sends are
    non-blocking (they hold the sender's outgoing link, not its clock) and
    are waited for at the end of each phase; receives block. Within segment
    k a rank works on the trees where it is a leaf first going up, last
    going down. The rules are the transport's (``transport/local.py``).
    """
    clock, out_free, in_free = [0.0] * p, [0.0] * p, [0.0] * p
    posted: dict[tuple[int, int, int], float] = {}  # (tree, from, to) -> when the send started

    def post(src: int, dst: int, key: int, n: int) -> None:
        posted[key, src, dst] = start = max(clock[src], out_free[src])
        out_free[src] = start + net.message_time(n)

    def deliver(src: int, dst: int, key: int, n: int) -> None:
        begin = max(posted[key, src, dst], clock[dst], in_free[dst])
        clock[dst] = in_free[dst] = begin + net.message_time(n)

    for segment in schedule:  # 1. reduce
        for key, (tree, n) in enumerate(segment):  # the leaves' sends first
            for rank in range(p):
                if not tree.children[rank] and tree.parent[rank] >= 0:
                    post(rank, tree.parent[rank], key, n)
        for key, (tree, n) in enumerate(segment):  # then children before parents
            for rank in post_order(tree):
                if tree.children[rank]:
                    for child in tree.children[rank]:
                        deliver(child, rank, key, n)
                        clock[rank] += net.reduce_time(n)
                    if tree.parent[rank] >= 0:
                        post(rank, tree.parent[rank], key, n)
    clock = [max(now, free) for now, free in zip(clock, out_free, strict=True)]  # wait sends
    for segment in schedule:  # 2. broadcast
        for key, (tree, n) in enumerate(segment):  # parents before children
            for rank in reversed(post_order(tree)):
                if tree.children[rank]:
                    if tree.parent[rank] >= 0:
                        deliver(tree.parent[rank], rank, key, n)
                    for child in tree.children[rank]:
                        post(rank, child, key, n)
        for key, (tree, n) in enumerate(segment):  # then the leaves' receives
            for rank in range(p):
                if not tree.children[rank] and tree.parent[rank] >= 0:
                    deliver(tree.parent[rank], rank, key, n)
    return max(max(now, free) for now, free in zip(clock, out_free, strict=True))


def post_order(tree: Tree) -> list[int]:
    order, stack = [], [(tree.root, False)]
    while stack:
        rank, expanded = stack.pop()
        if expanded:
            order.append(rank)
        else:
            stack.append((rank, True))
            stack.extend((child, False) for child in reversed(tree.children[rank]))
    return order
