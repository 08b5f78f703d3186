"""The seeded epoch shuffle: the one order every sampler and trainer draws.

Every epoch must be shuffled differently (or a model sees the same batches
in the same order forever), yet a run must be repeatable, and P processes
must agree on the order without sending it to each other. So the order of
epoch ``e`` is a function of two integers only, ``(seed, e)``: any process
that asks gets the same permutation. The data loaders' samplers
(:mod:`minidist.data.batching`, :mod:`minidist.data.distributed`) and
GloVe's training loop all draw it here.
"""

from __future__ import annotations

import numpy as np


def epoch_order(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The order of ``range(n)`` in ``epoch``: ``default_rng((seed, epoch)).permutation(n)``,
    or ``0, 1, ..., n - 1`` when ``shuffle`` is False. int64; O(n)."""
    if n < 0:
        raise ValueError(f"epoch_order: n must be >= 0, got {n}")
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    if seed < 0 or epoch < 0:
        raise ValueError(f"epoch_order: seed and epoch must be >= 0, got {seed} and {epoch}")
    return np.random.default_rng((seed, epoch)).permutation(n)
