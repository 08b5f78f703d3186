"""Pictures of distributed runs: per-rank timelines of compute, communication and waiting.

    from minidist.viz import plot_timeline
    plot_timeline(traces, "timeline.png")     # traces[rank]: (kind, lane, start, end) tuples

matplotlib is imported only when a plot is drawn, with the file-only "Agg"
backend unless one was chosen already, so plotting works on a cluster node
without a display.
"""

from minidist.viz.timeline import COLORS, plot_timeline, summarize

__all__ = ["COLORS", "plot_timeline", "summarize"]
