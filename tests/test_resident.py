"""The memory a check reads from the operating system (``labkit.resident``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from minidist.labkit.resident import memory_of, peak_growth, readable

MIB = 2 ** 20
pytestmark = pytest.mark.skipif(not readable(os.getpid()), reason="no /proc/<pid>/clear_refs")


def test_what_is_held_counts_as_kept_and_what_is_freed_only_at_the_peak():
    with memory_of(None) as held:  # None lives here: this process is measured
        kept = np.ones(64 * MIB // 8)
    with memory_of(None) as passing:
        float(np.ones(64 * MIB // 8).sum())
    assert 63 * MIB <= held.kept <= held.bytes <= 70 * MIB
    assert 63 * MIB <= passing.bytes <= 70 * MIB and passing.kept <= 4 * MIB
    del kept


def test_memory_freed_before_is_not_reused_unseen():
    """Holes of freed 4 MiB blocks in a heap (glibc's own rule puts them there once a 30 MiB
    block was freed) would take the step's arrays unseen: counted without ``memory_of``'s
    preparation, the step below keeps 0 bytes."""
    float(np.ones(30 * MIB // 8).sum())  # freed: glibc raises its threshold
    blocks = [np.ones(4 * MIB // 8) for _ in range(16)][::2]  # every other one freed
    with memory_of(None) as step:
        rows = [np.ones(4 * MIB // 8) for _ in range(8)]
    assert 31 * MIB <= step.kept <= 36 * MIB
    del blocks, rows


def test_a_process_it_cannot_read_gives_no_figure():
    assert not readable(None)
    with peak_growth(None) as growth:
        pass
    assert growth.bytes is None and growth.kept is None
