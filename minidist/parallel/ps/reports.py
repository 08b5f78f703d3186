"""What a server returns when every worker has stopped, and the model put back together.

Each server's ``serve`` ends with a :class:`ServerReport`: its key range, its
final values, the shard's version, the staleness it logged and the requests
it took. ``gather_reports`` puts the servers' values back in one vector, in
the layout's order, for the caller that holds them all (a test, rank 0).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from minidist.parallel.ps.consistency import StalenessLog
from minidist.parallel.ps.keys import KeyLayout


@dataclass
class ServerReport:
    """What a server returns: its final shard and what it saw."""

    server: int
    key_range: tuple[int, int]
    values: np.ndarray
    version: int
    staleness: StalenessLog
    requests: Counter = field(default_factory=Counter)  # Kind name -> count
    dropped: list[int] = field(default_factory=list)  # workers that ended without STOP


def gather_reports(reports: list[ServerReport], layout: KeyLayout) -> np.ndarray:
    """Every server's final values as one vector of all keys (``layout.flatten``'s order)."""
    ordered = sorted(reports, key=lambda report: report.key_range)
    values = np.concatenate([report.values for report in ordered])
    if values.size != layout.num_values:
        raise ValueError(f"the reports hold {values.size} values, the layout {layout.num_values}")
    return values
