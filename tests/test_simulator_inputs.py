"""What the in-process simulator refuses: a bad world size, rank, failure count, straggler or
tag is a ValueError naming it, before a rank runs; never a raw Python error, a silent
acceptance, or a clock that runs backwards or becomes NaN."""

from __future__ import annotations

import numpy as np
import pytest

import minidist as md
from minidist.comm import LocalCluster, RankError, Straggler


@pytest.mark.parametrize("world_size", [0, -2, 2.0, "4", None, True])
def test_a_world_size_that_is_not_a_positive_integer_is_refused(world_size):
    with pytest.raises(ValueError, match=r"world_size must be an integer >= 1, got "):
        md.launch(lambda c: c.rank, world_size=world_size)
    with pytest.raises(ValueError, match=r"world_size must be an integer >= 1"):
        LocalCluster(world_size)


def test_a_world_size_of_numpys_integer_type_runs():
    assert md.launch(lambda c: c.rank, world_size=np.int64(3)) == [0, 1, 2]


@pytest.mark.parametrize("options, words", [
    (dict(stragglers={1.5: 1.0}), r"straggler/failure for rank 1\.5"),
    (dict(stragglers={3: 1.0}), r"straggler/failure for rank 3, but ranks are 0\.\.2"),
    (dict(failures={0: -1}), r"failures\[0\] .* must be an integer >= 0, got -1"),
    (dict(failures={0: 2.5}), r"failures\[0\] .* must be an integer >= 0, got 2\.5"),
    (dict(eager_limit=-1), r"eager_limit must be an integer >= 0"),
])
def test_bad_cluster_options_are_refused(options, words):
    with pytest.raises(ValueError, match=words):
        LocalCluster(3, **options)


@pytest.mark.parametrize("field, value", [
    ("delay", -5.0), ("delay", float("nan")), ("slowdown", -3.0), ("slowdown", float("inf")),
])
def test_a_straggler_that_would_turn_the_clock_back_is_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a finite number >= 0"):
        Straggler(**{field: value})
    if field == "delay":  # the shorthand {rank: seconds} too
        with pytest.raises(ValueError, match="delay must be a finite number >= 0"):
            LocalCluster(2, stragglers={1: value})


@pytest.mark.parametrize("tag", [1.5, "3", -1])
def test_a_tag_that_is_not_a_non_negative_integer_is_refused(tag):
    def fn(c):
        c.send(np.ones(2), 1 - c.rank, tag=tag)

    with pytest.raises(RankError, match=r"send tag must be an integer >= 0, got "):
        md.launch(fn, world_size=2)
