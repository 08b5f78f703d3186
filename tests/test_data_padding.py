"""DistributedSampler's padding, as its module's docstring tells it."""

import numpy as np
import pytest

from minidist.data import DistributedSampler


@pytest.mark.parametrize("n, p", [(2, 5), (1, 4), (3, 7), (5, 4), (10, 3), (8, 4)])
def test_padding_wraps_round_the_epoch_as_often_as_it_takes(n, p):
    """The docstring said the first P·ceil(N/P) - N samples are read twice; with N < P the
    order wraps more than once (N=2, P=5: the first sample read three times)."""
    samplers = [DistributedSampler(n, p, rank, seed=1) for rank in range(p)]
    order = samplers[0].order()[:n]  # the epoch's permutation, before the padding
    reads = np.bincount(np.concatenate([s.indices() for s in samplers]), minlength=n)
    total = p * -(-n // p)
    expected = [-(-(total - k) // n) for k in range(n)]  # position k: ceil((total - k) / N)
    assert reads[order].tolist() == expected
    if n >= p:
        assert expected == [2] * (total - n) + [1] * (n - (total - n))
    else:
        assert max(expected) == -(-p // n)
