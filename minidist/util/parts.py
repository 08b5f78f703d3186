"""Splitting N items into P parts: the one rule every layer uses.

A vector's chunks in a ring allreduce, a data sampler's share of an epoch,
a GloVe table's column blocks: all are ``chunk_bounds(n, p)``, so that part
k means the same range everywhere. (A parameter server's key ranges balance
values or load, not keys: ``parallel/ps/keys.py``.)
"""

from __future__ import annotations

import functools


def chunk_bounds(n: int, p: int) -> tuple[tuple[int, int], ...]:
    """Split ``range(n)`` into ``p`` contiguous ``(start, stop)`` parts; the first
    ``n % p`` are one longer than the rest (some are empty when ``n < p``)."""
    if p < 1:
        raise ValueError(f"chunk_bounds: need at least one part, got p={p}")
    if n < 0:
        raise ValueError(f"chunk_bounds: n must be >= 0, got {n}")
    return _parts(int(n), int(p))


@functools.lru_cache(maxsize=256)
def _parts(n: int, p: int) -> tuple[tuple[int, int], ...]:
    """Computed once per ``(n, p)`` and shared (read-only): P in-process ranks would
    otherwise each hold their own P pairs."""
    base, longer = divmod(n, p)
    bounds, start = [], 0
    for k in range(p):
        stop = start + base + (1 if k < longer else 0)
        bounds.append((start, stop))
        start = stop
    return tuple(bounds)
