"""The floor under the simulator's ring: its work in Python with nothing of the transport.

``bench.simulator`` times the library's ring allreduce on ``LocalCluster``: each
message is posted, matched, priced on two clocks, counted and checked. This
times what no simulator of the same design can skip, in the same process and
run: P greenlets taking turns, one dict of messages by (sender, receiver,
step), and per message the ring's numpy work (a copy of the chunk sent, a copy
into the receive buffer, one reduction). No clock, no counters, no checks, no
matching rules, no errors.

A target under this floor cannot be met by making the transport leaner; only by
moving the per-message work out of Python.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np
from greenlet import greenlet

from minidist.util import chunk_bounds


def ring_floor(p: int, values: int) -> float:
    """Wall seconds of the bare ring (module docstring) on ``p`` ranks of ``values``
    float64 each; checks the sums."""
    hub = greenlet.getcurrent()
    mailboxes: dict[tuple[int, int, int], np.ndarray] = {}  # (from, to, step)
    waiting: set[int] = set()
    turns: deque[int] = deque(range(p))
    bounds = chunk_bounds(values, p)
    vectors = [np.full(values, float(rank)) for rank in range(p)]

    def rank_body(rank: int) -> None:
        hub.switch()  # started by the hub; the timed run resumes here
        x, right, left = vectors[rank], (rank + 1) % p, (rank - 1) % p
        incoming = np.empty(max(hi - lo for lo, hi in bounds))
        for step in range(2 * (p - 1)):
            s_lo, s_hi = bounds[(rank - step) % p]
            r_lo, r_hi = bounds[(rank - step - 1) % p]
            mailboxes[rank, right, step] = x[s_lo:s_hi].copy()
            if right in waiting:
                waiting.discard(right)
                turns.append(right)
            while (left, rank, step) not in mailboxes:
                waiting.add(rank)
                hub.switch()
            received = incoming[:r_hi - r_lo]
            received[...] = mailboxes.pop((left, rank, step))
            if step < p - 1:
                np.add(x[r_lo:r_hi], received, out=x[r_lo:r_hi])
            else:
                x[r_lo:r_hi] = received

    tasks = [greenlet(rank_body, parent=hub) for _ in range(p)]
    for rank, task in enumerate(tasks):
        task.switch(rank)
    started = time.perf_counter()
    while turns:
        tasks[turns.popleft()].switch()
    wall = time.perf_counter() - started
    expected = p * (p - 1) / 2
    if not all(task.dead for task in tasks) or any((v != expected).any() for v in vectors):
        raise RuntimeError(f"the bare ring on {p} ranks went wrong")
    return wall
