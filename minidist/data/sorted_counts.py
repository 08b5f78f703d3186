"""Counts kept as two arrays: sorted, distinct int64 keys, and each key's summed value.

Co-occurrence counting (``cooccur.py``) keeps its running total so: a pair
of words is one key, a chunk's pairs are sorted so that equal keys sit side
by side and add up (``sum_sorted_duplicates``), and the chunk's counts go
into the total by binary search (``merge_counts``): no dictionary of pairs,
a few bytes per distinct pair.
"""

from __future__ import annotations

import numpy as np


def run_starts(keys: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted, non-empty ``keys`` starts."""
    return np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))


def sum_sorted_duplicates(keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of sorted ``keys`` and, for each, the sum of its ``vals``. O(n)."""
    if len(keys) == 0:
        return keys, vals
    starts = run_starts(keys)
    return keys[starts], np.add.reduceat(vals, starts)


def merge_counts(keys: np.ndarray, vals: np.ndarray, new_keys: np.ndarray,
                 new_vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Add sorted unique ``(new_keys, new_vals)`` into sorted unique ``(keys, vals)``.

    Keys already present get their values added in place; the others are
    inserted at the positions a binary search finds. Cost: O(m log n) to
    search m new keys among n, O(n + m) to copy.
    """
    where = np.searchsorted(keys, new_keys)
    present = where < len(keys)
    present[present] = keys[where[present]] == new_keys[present]
    vals[where[present]] += new_vals[present]
    absent = ~present
    return (np.insert(keys, where[absent], new_keys[absent]),
            np.insert(vals, where[absent], new_vals[absent]))
