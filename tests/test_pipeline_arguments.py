"""Pipeline arguments: a bad micro-batch or stage count is refused by name, on every rank."""

from __future__ import annotations

import re

import numpy as np
import pytest

import minidist as md
from minidist.nn import MLP
from minidist.parallel.pipeline import (
    Pipeline,
    bubble_formula,
    check_schedule,
    gpipe,
    naive,
    one_f_one_b,
)

BAD_COUNTS = [0, -1, 2.5, 2.0, "4", None, True]


def message(name: str, value) -> str:
    return re.escape(f"{name} must be an integer >= 1, got {value!r}")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("schedule", ["1f1b", "given"])
@pytest.mark.parametrize("micro_batches", BAD_COUNTS)
def test_pipeline_refuses_a_bad_micro_batch_count_on_every_rank(micro_batches, schedule):
    def rank(c):
        steps = gpipe(c.size, 2) if schedule == "given" else schedule
        with pytest.raises(ValueError, match=message("micro_batches", micro_batches)):
            Pipeline(MLP([5, 7, 3], dtype=np.float64, rng=0), c, micro_batches, steps)
        return True

    assert md.launch(rank, 2, backend="local", timeout=30) == [True, True]


@pytest.mark.parametrize("make", [naive, gpipe, one_f_one_b, bubble_formula])
@pytest.mark.parametrize("count", BAD_COUNTS)
def test_schedules_refuse_bad_sizes_by_name(make, count):
    with pytest.raises(ValueError, match=message("micro_batches", count)):
        make(2, count)
    with pytest.raises(ValueError, match=message("stages", count)):
        make(count, 2)


def test_check_schedule_refuses_a_bad_micro_batch_count():
    with pytest.raises(ValueError, match=message("micro_batches", 2.5)):
        check_schedule(gpipe(2, 2), 2.5)


def test_a_numpy_integer_count_is_a_count():
    assert gpipe(2, np.int64(2)) == gpipe(2, 2)
    check_schedule(gpipe(2, 2), np.int64(2))
