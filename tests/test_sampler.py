"""DistributedSampler: disjoint, complete, seeded shards; the global batch of one process."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidist.data import BatchSampler, DataLoader, Dataset, DistributedSampler


def shards(n, p, **options):
    return [DistributedSampler(n, p, r, **options) for r in range(p)]


@settings(deadline=None, max_examples=60)
@given(n=st.integers(0, 200), p=st.integers(1, 9), batch=st.integers(1, 17),
       seed=st.integers(0, 3), epoch=st.integers(0, 3))
def test_padded_shards_cover_every_sample_and_overlap_only_by_the_padding(n, p, batch, seed,
                                                                          epoch):
    samplers = shards(n, p, seed=seed, batch_size=batch)
    for s in samplers:
        s.set_epoch(epoch)
    parts = [np.concatenate(list(s)) if len(s) else np.zeros(0, int) for s in samplers]
    size = -(-n // p)
    assert all(len(part) == size for part in parts)  # every rank: ceil(N / P) samples
    assert len({len(s) for s in samplers}) == 1  # ... and the same number of batches
    everything = np.concatenate(parts)
    assert set(everything.tolist()) == set(range(n))  # complete
    counts = np.bincount(everything, minlength=n) if n else np.zeros(0)
    assert counts.sum() - n == p * size - n  # the only repeats are the padding
    assert counts.max(initial=0) <= -(-p * size // max(n, 1))  # wrapping spreads the pad


@settings(deadline=None, max_examples=60)
@given(n=st.integers(0, 200), p=st.integers(1, 9), batch=st.integers(1, 17))
def test_drop_last_shards_are_disjoint_and_equal(n, p, batch):
    samplers = shards(n, p, drop_last=True, batch_size=batch)
    parts = [s.indices() for s in samplers]
    everything = np.concatenate(parts)
    assert all(len(part) == n // p for part in parts)
    assert len(set(everything.tolist())) == len(everything) == p * (n // p)  # disjoint
    for s, part in zip(samplers, parts, strict=True):
        batches = list(s)
        assert len(batches) == len(s) and all(len(b) <= batch for b in batches)
        np.testing.assert_array_equal(np.concatenate(batches) if batches else part[:0], part)


@pytest.mark.parametrize("p, b", [(1, 5), (2, 4), (3, 3), (4, 2)])
def test_step_k_of_all_ranks_is_step_k_of_one_process_with_batch_p_times_b(p, b):
    n = p * b * 6
    one = list(BatchSampler(n, p * b, seed=3))
    ranks = [list(s) for s in shards(n, p, seed=3, batch_size=b)]
    assert len(ranks[0]) == len(one)
    for k, global_batch in enumerate(one):
        together = np.concatenate([ranks[r][k] for r in range(p)])
        np.testing.assert_array_equal(np.sort(together), np.sort(global_batch))


def test_epochs_are_seeded_reproducible_and_different():
    a, b = DistributedSampler(50, 3, 1, seed=5), DistributedSampler(50, 3, 1, seed=5)
    np.testing.assert_array_equal(a.indices(), b.indices())
    first = a.indices()
    a.set_epoch(1)
    assert not np.array_equal(a.indices(), first)
    other_seed = DistributedSampler(50, 3, 1, seed=6)
    assert not np.array_equal(other_seed.indices(), first)
    in_order = DistributedSampler(10, 3, 1, shuffle=False).indices()
    np.testing.assert_array_equal(in_order, [1, 4, 7, 0])  # 10 -> 12 by wrapping: 0, 1 again


def test_data_loader_uses_the_sampler_and_advances_epochs():
    data = Dataset(np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20), 20)
    sampler = DistributedSampler(len(data), 2, 0, seed=1, batch_size=3)
    loader = DataLoader(data, sampler=sampler)
    epoch0 = np.concatenate([y for _, y in loader])
    epoch1 = np.concatenate([y for _, y in loader])
    assert len(loader) == 4 and len(epoch0) == 10
    assert not np.array_equal(epoch0, epoch1)
    sampler.set_epoch(0)
    np.testing.assert_array_equal(epoch0, sampler.indices())  # y == index here


def test_the_loader_and_its_sampler_share_one_epoch_counter():
    data = Dataset(np.arange(24, dtype=np.float32).reshape(12, 2), np.arange(12), 12)
    sampler = DistributedSampler(len(data), 2, 1, seed=0, batch_size=3)
    loader = DataLoader(data, sampler=sampler)
    sampler.set_epoch(5)  # PyTorch's way to resume: on the sampler
    ids = np.concatenate([y for _, y in loader])
    np.testing.assert_array_equal(ids, epoch_of(5))  # y == index here
    assert loader.epoch == sampler.epoch == 6  # the next pass runs epoch 6
    loader.set_epoch(2)  # or on the loader: the sampler learns it
    assert sampler.epoch == 2
    np.testing.assert_array_equal(np.concatenate([y for _, y in loader]), epoch_of(2))


def epoch_of(epoch):
    sampler = DistributedSampler(12, 2, 1, seed=0, batch_size=3)
    sampler.set_epoch(epoch)
    return sampler.indices()


@pytest.mark.parametrize("args, words", [((10, 0, 0), "num_replicas"), ((10, 2, 2), "rank"),
                                         ((-1, 2, 0), "num_samples"),
                                         ((10, 2.0, 0), "num_replicas"), ((10, 2, 0.0), "rank")])
def test_bad_arguments_are_named(args, words):
    with pytest.raises(ValueError, match=words):
        DistributedSampler(*args)
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match="batch_size"):
            DistributedSampler(10, 2, 0, batch_size=bad)


@pytest.mark.parametrize("seed", [None, -1, 1.5])
def test_a_seed_that_cannot_seed_is_refused_when_the_sampler_is_made(seed):
    """It was taken, and the first pass failed (None: a TypeError comparing None and 0)."""
    with pytest.raises(ValueError, match=rf"seed must be an integer >= 0, got {seed!r}"):
        BatchSampler(10, 2, seed=seed)
    with pytest.raises(ValueError, match="seed must be"):
        DistributedSampler(10, 2, 0, seed=seed)
