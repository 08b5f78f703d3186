"""A pipeline's Gantt chart: which stage ran which micro-batch when, as in the GPipe paper.

Each rank (stage k of the model) is one row; time runs left to right. Each
step of its schedule is one bar, labelled with its micro-batch: forwards in
one colour, backwards in another. Between the bars the row shows grey: the
stage is idle, waiting for an activation from the stage before it or a
gradient from the one after. That grey is the **bubble**; its share of the
mini-batch's span is written beside each row, to be read against
(K-1)/(M+K-1) (``minidist.parallel.pipeline.bubble_formula``).

Reading it: naive model parallelism is a staircase, one stage busy at a
time; GPipe fills the rows with all the forwards, then all the backwards;
1F1B interleaves them once its warm-up is done, and the grey corners are
the same size as GPipe's.

Traces are each rank's ``Pipeline.last_run.trace``: ``(step, start, end)``
with steps named like ``"F3"``, times since the mini-batch's common origin,
on the wall clock or the in-process transport's modelled clock.
Cost: O(number of steps) to draw.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from minidist.parallel.pipeline.schedules import bubbles
from minidist.viz.figure import finish, pyplot

COLORS = {"F": "#4c72b0", "B": "#55a868", "idle": "#e6e6e6"}
NAMES = {"F": "forward", "B": "backward", "idle": "idle (bubble)"}

Trace = Sequence[tuple[str, float, float]]


def plot_gantt(traces: Sequence[Trace], path: str | os.PathLike | None = None,
               title: str = "pipeline schedule, per stage"):
    """Draw ``traces[rank]`` (``(step, start, end)`` tuples) as one row per rank.

    Saves a PNG to ``path`` when given; returns the matplotlib figure.
    """
    plt = pyplot()

    if not traces or not all(traces):
        raise ValueError("plot_gantt needs at least one step on every rank")
    span = max(end for trace in traces for _, _, end in trace)
    unit, scale = ("ms", 1e3) if span < 1 else ("s", 1.0)
    steps = max(len(trace) for trace in traces)
    ranks = len(traces)
    fig, ax = plt.subplots(figsize=(min(16, 4 + 0.35 * steps), 1.0 + 0.7 * ranks))
    for rank, trace in enumerate(traces):
        ax.broken_barh([(0, span * scale)], (rank + 0.1, 0.8), facecolors=COLORS["idle"])
        for step, start, end in trace:
            phase, micro = step[0], step[1:]
            ax.broken_barh([(start * scale, (end - start) * scale)], (rank + 0.1, 0.8),
                           facecolors=COLORS[phase], edgecolor="white", linewidth=0.5)
            if end - start >= span / 80:  # a number only where it fits
                ax.text((start + end) / 2 * scale, rank + 0.5, micro, ha="center",
                        va="center", color="white", fontsize=8 if steps <= 32 else 6)
    ax.set_yticks([rank + 0.5 for rank in range(ranks)])
    ax.set_yticklabels([f"rank {rank}\nbubble {bubble:.0%}"
                        for rank, bubble in enumerate(bubbles(traces))])
    ax.set_ylim(ranks, 0)  # rank 0 (the first stage) on top
    ax.set_xlim(0, span * scale)
    ax.set_xlabel(f"time ({unit})")
    return finish(fig, ax, title, {NAMES[key]: color for key, color in COLORS.items()}, path)
