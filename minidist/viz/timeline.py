"""A timeline per rank: where each rank spent a training step, drawn from a recorded trace.

Each rank is one row; time runs left to right. A row has two lanes:

- top, the training thread: **compute** (forward and backward) then
  **wait** (backward is done, the averaged gradients are not yet here);
- bottom, the communication thread: **comm**, one bar per bucket allreduce.

Reading it: a comm bar under a compute bar is communication hidden behind
backward (overlap); a long wait on every rank but one is a straggler — the
slow rank's compute bar is the longest, and everyone else's wait ends when
it finally joins the allreduce. In synchronous training, step time is the
*slowest* rank's compute plus the communication left exposed.

Traces come from :class:`minidist.parallel.timing.TraceRecorder`
(``recorder.to_list()`` on each rank, gathered by ``md.launch``), on the
wall clock or on the in-process transport's modelled clock: the drawing is
the same, in seconds of either.
Cost: O(number of intervals) to draw.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from minidist.viz.figure import finish, pyplot

COLORS = {"compute": "#4c72b0", "comm": "#dd8452", "wait": "#c44e52"}
LANE_Y = {"main": 0.08, "comm": 0.52}  # where each lane starts in a rank's row (y grows down)
LANE_HEIGHT = 0.4

Trace = Sequence[tuple[str, str, float, float]]


def summarize(traces: Sequence[Trace]) -> list[dict[str, float]]:
    """Seconds per kind for each rank: ``[{"compute": .., "comm": .., "wait": ..}, ...]``."""
    return [{kind: sum(end - start for k, _, start, end in trace if k == kind)
             for kind in COLORS} for trace in traces]


def plot_timeline(traces: Sequence[Trace], path: str | os.PathLike | None = None,
                  title: str = "data-parallel steps, per rank", start: float = 0.0,
                  end: float | None = None):
    """Draw ``traces[rank]`` (``(kind, lane, start, end)`` tuples) as one row per rank.

    Saves a PNG to ``path`` when given; returns the matplotlib figure.
    ``start``/``end`` (seconds) crop the time axis.
    """
    plt = pyplot()

    ranks = len(traces)
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.7 * ranks))
    for rank, trace in enumerate(traces):
        for kind, lane, begin, stop in trace:
            if stop < start or (end is not None and begin > end):
                continue
            ax.broken_barh([(begin, stop - begin)], (rank + LANE_Y[lane], LANE_HEIGHT),
                           facecolors=COLORS[kind], edgecolor="white", linewidth=0.3)
    ax.set_yticks([rank + 0.5 for rank in range(ranks)])
    ax.set_yticklabels([f"rank {rank}" for rank in range(ranks)])
    ax.set_ylim(ranks, 0)  # rank 0 on top
    latest = max((stop for trace in traces for *_, stop in trace), default=1.0)
    ax.set_xlim(start, end if end is not None else latest)
    ax.set_xlabel("time (s)")
    return finish(fig, ax, title, COLORS, path)
