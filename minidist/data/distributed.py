"""Sharding an epoch across ranks: each data-parallel rank reads its own part.

In data parallelism (Lecture 4) P ranks hold the same model and split every
batch: the global batch of B = P·b samples becomes P local batches of b.
Each rank must read different samples (otherwise P ranks compute the same
gradient P times), and together they must read every sample once per epoch.

:class:`DistributedSampler` does it without any message:

1. Every rank draws the *same* permutation of ``0..N-1`` from the two
   integers ``(seed, epoch)`` — exactly :class:`BatchSampler`'s order, so
   ``set_epoch(e)`` must be called with the same ``e`` on every rank.
2. Rank ``r`` keeps every P-th index, starting at position ``r``:
   ``order[r::P]``, and cuts it into batches of ``batch_size``.

Strided rather than contiguous shards make step k of the P ranks read,
together, positions ``k·P·b .. (k+1)·P·b - 1`` of the permutation: the very
batch one process with batch size P·b reads at step k. That is what makes
data-parallel training *equal* to single-process training, not merely
similar (``tests/test_ddp.py`` checks it).

**N not divisible by P.** Ranks must take the same number of steps (every
step is a collective: a rank with one batch fewer would leave the others
waiting forever). Two choices, as in PyTorch:

- ``drop_last=False`` (default): pad the permutation to a multiple of P by
  *wrapping around* to its start, as often as it takes, so each rank gets
  ceil(N / P) samples. With N >= P the first ``P·ceil(N/P) - N`` (< P)
  samples of the epoch are read twice; with fewer samples than ranks the
  order wraps more than once, and a sample is read up to ceil(P / N) times
  (N = 2, P = 5: the first three times, the second twice). Shards are
  disjoint only when P divides N.
- ``drop_last=True``: drop the tail of the permutation, so each rank gets
  floor(N / P) samples; up to P - 1 samples are skipped this epoch (a
  different few each epoch, since the order changes).

Within a rank the last batch may be short (``len(shard) % batch_size``); it
has the same length on every rank, so the global step stays well defined.

Cost per epoch on every rank: O(N) to draw the permutation, O(N / P) kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from numbers import Integral

import numpy as np

from minidist.data.batching import BatchSampler
from minidist.util.values import whole


class DistributedSampler(BatchSampler):
    """Rank ``rank``'s batches of a dataset of ``num_samples``, shared by ``num_replicas`` ranks.

    A sampler for :class:`~minidist.data.DataLoader` (``DataLoader(dataset,
    sampler=DistributedSampler(len(dataset), c.size, c.rank, batch_size=b))``):
    iterating yields index arrays of at most ``batch_size`` indices;
    ``len()`` is the number of batches per epoch, the same on every rank.
    A :class:`BatchSampler` that keeps every P-th index of the epoch's order, so
    ``set_epoch`` must be given the same epoch on every rank.
    """

    def __init__(self, num_samples: int, num_replicas: int, rank: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, *, batch_size: int = 1) -> None:
        num_replicas = whole("num_replicas", num_replicas, least=1)
        if isinstance(rank, bool) or not isinstance(rank, Integral) \
                or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be an integer in 0..{num_replicas - 1}, got {rank!r}")
        super().__init__(num_samples, batch_size, shuffle, seed, drop_last)
        self.num_replicas = num_replicas
        self.rank = int(rank)

    @property
    def shard_size(self) -> int:
        """Samples per rank per epoch: floor(N / P) with ``drop_last``, else ceil(N / P)."""
        if self.drop_last:
            return self.num_samples // self.num_replicas
        return -(-self.num_samples // self.num_replicas)

    def order(self) -> np.ndarray:
        """The whole epoch's order, common to all ranks, padded or cut to a multiple of P."""
        n, total = self.num_samples, self.shard_size * self.num_replicas
        order = super().order()  # every rank draws the same
        if total <= n:
            return order[:total]  # drop_last: the tail is skipped this epoch
        return np.resize(order, total)  # pad by wrapping around to the start

    def indices(self) -> np.ndarray:
        """This rank's shard of the current epoch: every P-th index, from position ``rank``."""
        return self.order()[self.rank::self.num_replicas]

    def __len__(self) -> int:
        return -(-self.shard_size // self.batch_size)  # ceil(shard / b)

    def __iter__(self) -> Iterator[np.ndarray]:
        shard = self.indices()  # drawn now, so a later set_epoch cannot change this pass
        size = self.batch_size
        return (shard[start:start + size] for start in range(0, len(shard), size))
