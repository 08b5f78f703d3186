"""The pictures of minidist.viz: drawn from traces, saved as PNG files."""

from __future__ import annotations

import numpy as np

from minidist.parallel.pipeline.schedules import gpipe, simulate
from minidist.viz import plot_gantt, plot_timeline, summarize
from minidist.viz.figure import pyplot
from minidist.viz.scaling import plot_scaling


def test_timeline_draws_one_bar_per_interval_and_saves_a_png(tmp_path):
    traces = [[("compute", "main", 0.0, 0.5), ("wait", "main", 0.5, 0.75),
               ("comm", "comm", 0.25, 0.75)],
              [("compute", "main", 0.0, 0.75), ("comm", "comm", 0.5, 0.75)]]
    fig = plot_timeline(traces, tmp_path / "timeline.png", title="two ranks")
    assert (tmp_path / "timeline.png").stat().st_size > 0
    ax = fig.axes[0]
    assert len(ax.collections) == 5 and ax.get_xlim() == (0.0, 0.75)
    assert ax.get_title(loc="left") == "two ranks"
    assert summarize(traces) == [{"compute": 0.5, "comm": 0.5, "wait": 0.25},
                                 {"compute": 0.75, "comm": 0.25, "wait": 0.0}]


def test_timeline_crops_to_the_window_asked_for():
    traces = [[("compute", "main", 0.0, 1.0), ("compute", "main", 2.0, 3.0)]]
    ax = plot_timeline(traces, start=1.5, end=3.0).axes[0]
    assert len(ax.collections) == 1 and ax.get_xlim() == (1.5, 3.0)


def test_a_gantt_charts_title_never_runs_into_its_legend():
    """With M <= 4 the figure is narrow, and the title, on the legend's line, ran under it."""
    for micro in (1, 2, 4, 8):
        traces = [[(str(step), start, end) for step, start, end in rank]
                  for rank in simulate(gpipe(2, micro))]
        fig = plot_gantt(traces, None, title=f"gpipe, K = 2, M = {micro}: the last mini-batch")
        fig.canvas.draw()
        renderer, ax = fig.canvas.get_renderer(), fig.axes[0]
        title = ax._left_title.get_window_extent(renderer)
        legend = ax.get_legend().get_window_extent(renderer)
        assert not title.overlaps(legend) and title.y0 >= legend.y1 - 1, micro
        assert fig.bbox.contains(title.x1 - 1, title.y1 - 1), micro  # not cut off
        pyplot().close(fig)


def test_the_scaling_plot_keeps_every_line_in_sight():
    """ps takes the ring's times (and naive the ring's at 8 B): drawn under it, solid, they
    were in the legend and nowhere else."""
    from minidist.bench.scaling import sweep
    from minidist.comm import NetworkModel

    ranks = [2, 4, 8]
    fig = plot_scaling(sweep(NetworkModel(), [8, 1 << 26], ranks), ranks)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    ring = lines["ring"]
    for name in ("ps (= ring)", "naive"):
        assert lines[name].get_zorder() > ring.get_zorder()
        assert lines[name].get_linestyle() == "--"
    pyplot().close(fig)


def test_the_hot_spot_chart_keeps_its_legend_off_the_bars():
    """With two servers the legend, inside the axes, hid a bar."""
    from minidist.examples import ps_hotspots

    runs = {name: (np.array([3e5, 4e5]), 0.9) for name in ("plain ranges", "both")}
    fig = ps_hotspots.plot(runs, None)
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.get_legend().get_window_extent().y0 >= ax.get_window_extent().y1 - 1
    pyplot().close(fig)
