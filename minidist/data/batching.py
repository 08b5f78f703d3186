"""Mini-batches: which samples go into each step, and in which order.

Mini-batch SGD takes, at each step, the mean gradient over a batch of B
samples. One *epoch* is one pass over the data: the N samples are shuffled
and cut into ceil(N / B) batches (or floor(N / B) when the short last batch
is dropped), so every sample is used exactly once per epoch.

The order is chosen in two parts:

1. A *sampler* decides the indices: an iterable of index arrays, one per
   batch. :class:`BatchSampler` shuffles 0..N-1 with a generator seeded by
   ``(seed, epoch)`` and cuts the permutation into batches. A distributed
   sampler for data parallelism follows the same protocol, only handing
   each rank its own share of the indices.
2. The *loader* gathers the rows: ``x[indices], y[indices]``.

Why seed with ``(seed, epoch)``? Every epoch must be shuffled differently,
yet a run must be repeatable, and P processes must agree on the permutation
without sending it to each other: each builds it from the same two integers
(:func:`minidist.util.epoch_order`, the one shuffle of the library).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np

from minidist.data.dataset import Dataset
from minidist.util import epoch_order
from minidist.util.values import whole


class Sampler(Protocol):
    """What a :class:`DataLoader` asks of a sampler: index arrays, a length, an epoch.

    ``iter(sampler)`` fixes the pass's order when it is called (the loader moves
    the epoch on right after); ``sampler.epoch``, if it has one, is the epoch of
    the next pass, the one counter the loader and the sampler share.
    """

    def __iter__(self) -> Iterator[np.ndarray]: ...

    def __len__(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...


class BatchSampler:
    """Index arrays of ``batch_size`` samples out of ``range(num_samples)``, one epoch per pass.

    Iterating gives the batches of the current epoch, which
    :meth:`set_epoch` chooses (0 at first). With ``shuffle=True`` the order
    is ``np.random.default_rng((seed, epoch)).permutation(num_samples)``,
    so it depends on nothing but the seed and the epoch; with
    ``shuffle=False`` it is 0, 1, ..., N-1 every epoch.

    Cost per epoch: O(N) to draw the permutation.
    """

    def __init__(self, num_samples: int, batch_size: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False) -> None:
        self.num_samples = whole("num_samples", num_samples)
        self.batch_size = whole("batch_size", batch_size, least=1)  # 2.5 would skip samples
        self.shuffle = shuffle
        self.seed = whole("seed", seed)  # (seed, epoch) seeds numpy: no None, none < 0
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` in the next pass."""
        self.epoch = whole("epoch", epoch)

    def order(self) -> np.ndarray:
        """All indices of the current epoch, in the order the batches will take them."""
        return epoch_order(self.num_samples, self.seed, self.epoch, self.shuffle)

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_samples // self.batch_size
        return -(-self.num_samples // self.batch_size)  # ceil(N / B)

    def __iter__(self) -> Iterator[np.ndarray]:
        order = self.order()  # drawn now, so a later set_epoch cannot change this pass
        size = self.batch_size
        return (order[start:start + size] for start in range(0, len(self) * size, size))


def gather_batches(dataset: Dataset,
                   index_batches: Iterable[np.ndarray]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(x[indices], y[indices])`` for each index array: copies B rows per batch."""
    for indices in index_batches:
        yield dataset.x[indices], dataset.y[indices]


def iterate_batches(dataset: Dataset, batch_size: int, shuffle: bool = True, seed: int = 0,
                    drop_last: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One epoch of ``(x_batch, y_batch)``: the same batches as epoch 0 of a :class:`DataLoader`.

    Use it for one pass, e.g. to evaluate; train with a :class:`DataLoader`,
    which moves on to a new order every epoch::

        for x_batch, y_batch in iterate_batches(test, batch_size=256, shuffle=False):
            correct += (model(x_batch).argmax(axis=1) == y_batch).sum()
    """
    sampler = BatchSampler(len(dataset), batch_size, shuffle, seed, drop_last)
    return gather_batches(dataset, sampler)


class DataLoader:
    """Batches of ``dataset`` epoch after epoch, each epoch in a new, repeatable order.

    Each ``for batch in loader`` runs the current epoch and moves on to the
    next, so epoch e is shuffled by ``(seed, e)``. The epoch is counted in one
    place, the sampler (``loader.epoch`` is ``sampler.epoch``): call
    :meth:`set_epoch` on the loader or on its sampler to choose the epoch of
    the next pass (to resume a run, or to repeat an epoch); the passes after
    it count on from there. ``len(loader)`` is the number of batches per epoch.

    By default a :class:`BatchSampler` picks the indices; pass ``sampler``
    (anything with ``__iter__`` over index arrays, ``__len__`` and
    ``set_epoch``) instead of ``batch_size`` to pick them another way, such as
    one rank's share in data parallelism.
    """

    def __init__(self, dataset: Dataset, batch_size: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, sampler: Sampler | None = None) -> None:
        if (batch_size is None) == (sampler is None):
            raise ValueError("give DataLoader exactly one of batch_size or sampler")
        if sampler is None:
            sampler = BatchSampler(len(dataset), batch_size, shuffle, seed, drop_last)
        self.dataset = dataset
        self.sampler = sampler
        self._epoch = 0  # used only for a sampler that keeps no ``epoch`` of its own

    @property
    def epoch(self) -> int:
        """The epoch of the next pass: the sampler's."""
        return getattr(self.sampler, "epoch", self._epoch)

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` in the next pass; the passes after it count on from there."""
        self.sampler.set_epoch(epoch)
        self._epoch = epoch

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # The epoch moves on when the pass starts, so breaking out early still advances it.
        epoch = self.epoch
        self.sampler.set_epoch(epoch)
        batches = iter(self.sampler)  # this pass's order, fixed now
        self.set_epoch(epoch + 1)
        return gather_batches(self.dataset, batches)
