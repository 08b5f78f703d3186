"""What one in-process rank carries, shared by all its communicators.

:class:`Straggler` says how slow a rank is; :class:`RankState` holds what
``LocalCluster`` gives each rank (its network model, straggler, injected
failure, eager limit, tracing) and what its communicators keep up together
(counters and clocks, the prices of the moment, the calls made). Apart from
``local.py``: a rank's data here, there the communicator that moves it by
the clock's rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minidist.comm.cost.network import NetworkModel
from minidist.comm.transport.stats import LocalStats
from minidist.util.values import finite


@dataclass(frozen=True)
class Straggler:
    """A slow rank: ``delay`` s before each message it sends, compute × ``slowdown``."""

    delay: float = 0.0
    slowdown: float = 1.0
    sleep: bool = False  # also sleep for real, so wall-clock timings feel it too

    def __post_init__(self) -> None:  # a clock must never run backwards, nor become NaN
        object.__setattr__(self, "delay", finite("delay", self.delay))
        object.__setattr__(self, "slowdown", finite("slowdown", self.slowdown))


@dataclass
class RankState:
    """What belongs to one rank (task), shared by all its communicators."""

    world_rank: int
    network: NetworkModel
    straggler: Straggler = Straggler()
    fail_after: int | None = None
    eager_limit: int | None = None
    trace: bool = False
    stats: LocalStats = field(default_factory=LocalStats)
    calls: int = 0
    collective_calls: dict = field(default_factory=dict)  # (context, kind) -> count
    prices: NetworkModel = field(init=False)  # the model the clock uses now: ``network``,
    # or ``network.at(N)`` inside a collective on N bytes

    def __post_init__(self) -> None:
        self.prices = self.network
