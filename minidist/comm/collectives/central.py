"""Allreduce through servers: one master (naive), or P masters (sharded parameter server).

The first allreduce anyone writes: every rank sends its vector to rank 0,
rank 0 adds them up and sends the sum back. Correct and simple, but rank 0
receives ``(P-1)·N`` bytes while the other links idle: its link is the
bottleneck and the time grows linearly with P (fan-in P-1).

The parameter-server fix is to shard: key range k lives on rank k. Every
rank sends shard k to rank k, rank k reduces its shard and sends it back to
all. The total traffic is the same ``(P-1)·N``, but now spread evenly: each
rank sends and receives ``2(P-1)·N/P``, as in the ring, in just two steps,
though in each step P-1 messages converge on every rank (fan-in P-1, an
incast on a real network) and queue at its link.

Same bits on every rank: each element is reduced by exactly one rank (rank 0
in the order ``x_0 op x_1 op ... op x_(P-1)``; server k from its own term
round the ring backwards), and then copied to all.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.collectives.ring import chunk_bounds
from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator

TAG = Tag.CENTRAL


def naive_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str) -> None:
    """Allreduce through rank 0 (single master).

    Cost, N bytes: rank 0 receives and sends ``(P-1)·N`` bytes in ``2(P-1)``
    messages (fan-in P-1); every other rank sends N and receives N; time
    ``2(P-1)(alpha + N beta) + (P-1) N gamma``, all on rank 0's link.
    """
    rank, p = c.rank, c.size
    if p == 1:
        if out is not src:
            out[...] = src
        return
    if rank == 0:
        # 1. gather and reduce, in rank order: x_0 op x_1 op ... op x_(P-1)
        for source in range(1, p):
            first_into_out = source == 1 and out is not src
            incoming = out if first_into_out else c.scratch(len(out), out.dtype)
            # communication: rank `source`'s whole vector, to be added in
            c.recv(incoming, source, TAG)
            if first_into_out:  # out = x_0 op x_1, without copying x_0 first
                c.combine(op, out, src, incoming_first=True)
            else:
                c.combine(op, out, incoming)
        # 2. send the result back
        for dest in range(1, p):
            # communication: the full result to every other rank
            c.send(out, dest, TAG)
    else:
        # communication: my whole vector to the master, then the result back
        c.send(src, 0, TAG)
        c.recv(out, 0, TAG)


def ps_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str) -> None:
    """Allreduce with shard k reduced by rank k (sharded parameter server).

    Cost, N bytes, shard k of ``N_k ~ N/P`` bytes: rank k sends ``N - N_k``
    (the other shards) then ``(P-1) N_k`` (its reduced shard), about
    ``2(P-1)/P·N``, and receives as much; ``2(P-1)`` messages in 2 steps of
    fan-in P-1; time ``2(P-1)(alpha + N/P beta) + (P-1) N/P gamma``.
    """
    rank, p = c.rank, c.size
    if p == 1:
        if out is not src:
            out[...] = src
        return
    bounds = chunk_bounds(len(out), p)
    lo, hi = bounds[rank]
    mine = out[lo:hi]
    # 1. push: shard k of my vector to its server, rank k (my right neighbour first)
    peers = [(rank + k) % p for k in range(1, p)]
    # communication: shard `dest` of my vector to rank `dest`, which reduces it
    sends = [c.isend(src[slice(*bounds[dest])], dest, TAG) for dest in peers]
    # 2. reduce my shard: my own term, then my left neighbour's, the next one's...
    #    (the order in which they were sent to me; one fixed order, one reducer)
    for source in reversed(peers):
        first_into_mine = source == peers[-1] and out is not src
        incoming = mine if first_into_mine else c.scratch(hi - lo, out.dtype)
        # communication: rank `source`'s copy of my shard
        c.recv(incoming, source, TAG)
        if first_into_mine:  # mine = my term op the left's, without copying mine first
            c.combine(op, mine, src[lo:hi], incoming_first=True)
        else:
            c.combine(op, mine, incoming)
    for request in sends:
        request.wait()
    # 3. pull: my reduced shard to every rank, every other reduced shard from its server
    # communication: my reduced shard to every other rank
    sends = [c.isend(mine, dest, TAG) for dest in peers]
    for source in reversed(peers):
        # communication: reduced shard `source` from its server
        c.recv(out[slice(*bounds[source])], source, TAG)
    for request in sends:
        request.wait()
