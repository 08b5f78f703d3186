"""The ring's floor (bench/simulator_floor.py): the same sums as the library's ring."""

import pytest

from minidist.bench.simulator_floor import ring_floor


@pytest.mark.parametrize(("ranks", "values"), [(1, 5), (2, 1), (3, 7), (5, 3), (8, 64)])
def test_the_bare_ring_sums_every_value_on_every_rank(ranks, values):
    assert ring_floor(ranks, values) >= 0.0  # it raises if any rank's vector is wrong
