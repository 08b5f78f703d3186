"""Allreduce through servers: one master (naive), or P masters (sharded parameter server).

Lab 3, Tasks 1 and 2. The first allreduce anyone writes: every rank sends
its vector to rank 0, rank 0 reduces them and sends the result back.
Correct and simple, but rank 0's link carries everything, so the time
grows linearly with P (fan-in P-1).

The parameter-server fix is to shard: shard k (``chunk_bounds``) lives on
rank k. The total traffic is the naive one, ``(P-1)·N``, now spread evenly,
in two steps, though in each step P-1 messages converge on every rank
(fan-in P-1, an incast on a real network) and queue at its link.

Same bits on every rank: each element is reduced by exactly one rank, then
copied to all.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.transport.communicator import Communicator
from minidist.util import chunk_bounds


def naive_allreduce(x: np.ndarray, c: Communicator, op: str = "sum") -> np.ndarray:
    """Reduce ``x`` over all ranks of ``c`` in place, through rank 0; returns ``x``.

    naive: 2(P-1) rounds, all at rank 0; rank 0 receives and sends (P-1)·N
    bytes (fan-in P-1), every other rank sends N and receives N; time
    ``(P-1)(2(alpha + beta N) + gamma N)``.

    1. gather and reduce: rank 0 receives every other rank's vector, in rank
       order, and reduces it into its own: ``x_0 op x_1 op ... op x_(P-1)``;
    2. broadcast: rank 0 sends the result to every other rank.
    """
    if c.rank == 0:
        incoming = c.scratch(len(x), x.dtype)
        # 1. gather and reduce, in rank order
        for source in range(1, c.size):
            # communication: rank `source`'s whole vector
            c.recv(incoming, source)
            c.combine(op, x, incoming)
        # 2. send the result back
        for dest in range(1, c.size):
            # communication: the whole result to rank `dest`
            c.send(x, dest)
    else:
        # communication: my vector to the master, then the result from it
        c.send(x, 0)
        c.recv(x, 0)
    return x


def ps_allreduce(x: np.ndarray, c: Communicator, op: str = "sum") -> np.ndarray:
    """Reduce ``x`` over all ranks of ``c`` in place, shard k reduced by rank k; returns ``x``.

    ps: 2(P-1) rounds in 2 steps of fan-in P-1; rank k (shard of ``n_k``
    bytes) sends ``N - n_k`` (the other shards) then ``(P-1) n_k`` (its
    reduced shard), about 2(P-1)/P·N, in 2(P-1) messages, and receives as
    much; time ``(P-1)(2(alpha + beta N/P) + gamma N/P)``.

    1. push: rank r sends shard k of its vector to rank k, to its right
       neighbour first (r+1, r+2, ..., r-1), without waiting (``isend``);
    2. reduce: rank r receives the P-1 copies of its shard in the order they
       were sent to it (from r-1, r-2, ..., r+1) and reduces each into its own;
    3. pull: rank r sends its reduced shard to every other rank, in the same
       order, and receives every other reduced shard from its server.
    """
    p, me = c.size, c.rank
    bounds = chunk_bounds(len(x), p)
    lo, hi = bounds[me]
    incoming = c.scratch(hi - lo, x.dtype)
    peers = [(me + k) % p for k in range(1, p)]  # my right neighbour first: no queue at rank 0
    # 1. push: shard k of my vector to its server, rank k
    # communication: shard k to rank k, for every other k, all at once
    requests = [c.isend(x[slice(*bounds[k])], k) for k in peers]
    # 2. reduce my shard: the other ranks' copies, in the order they were sent to me
    for source in reversed(peers):
        # communication: rank `source`'s copy of my shard
        c.recv(incoming, source)
        c.combine(op, x[lo:hi], incoming)
    for request in requests:
        request.wait()
    # 3. pull: my reduced shard to everybody, every other reduced shard from its server
    # communication: my reduced shard to every other rank, all at once
    requests = [c.isend(x[lo:hi], k) for k in peers]
    for source in reversed(peers):
        # communication: shard `source`, reduced, from its server
        c.recv(x[slice(*bounds[source])], source)
    for request in requests:
        request.wait()
    return x
