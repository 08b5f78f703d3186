"""Pictures of distributed runs: per-rank timelines of compute, communication and waiting,
and a pipeline's Gantt chart.

    from minidist.viz import plot_gantt, plot_timeline
    plot_timeline(traces, "timeline.png")     # traces[rank]: (kind, lane, start, end) tuples
    plot_gantt(traces, "gantt.png")           # traces[rank]: Pipeline.last_run.trace

matplotlib is imported only when a plot is drawn, with the file-only "Agg"
backend unless one was chosen already, so plotting works on a cluster node
without a display.
"""

from minidist.viz.gantt import plot_gantt
from minidist.viz.timeline import COLORS, plot_timeline, summarize

__all__ = ["COLORS", "plot_gantt", "plot_timeline", "summarize"]
