"""What every picture of ``minidist.viz`` shares: pyplot without a display, one way to finish.

``pyplot()`` imports matplotlib's pyplot on first use, with the file-only
"Agg" backend unless a backend was chosen already (a notebook's inline one),
so plotting works on a cluster node without a display. ``finish`` puts the
legend right above the axes and the title above it, saves a PNG when given a path (and
closes the figure: a script drawing many leaks none) and returns the figure;
``save`` is that last part alone.
"""

from __future__ import annotations

import os
import sys


def pyplot():
    """matplotlib.pyplot, on the Agg backend when nobody chose one."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:  # nobody chose a backend yet
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def finish(fig, ax, title: str, legend: dict[str, str], path: str | os.PathLike | None):
    """Title, a legend of ``{label: colour}`` patches above the axes, save to ``path``."""
    from matplotlib.patches import Patch

    # the legend on a line of its own right above the axes, the title above it: side by
    # side, a long title ran under the legend of a narrow figure
    ax.legend(handles=[Patch(color=color, label=label) for label, color in legend.items()],
              loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(legend),
              fontsize="small", frameon=False, borderaxespad=0.2)
    ax.set_title(title, loc="left", pad=22)
    if path is not None:
        save(fig, path)
    else:
        fig.tight_layout()
    return fig


def save(fig, path: str | os.PathLike, dpi: int = 120) -> None:
    """Lay the figure out, write it as a PNG to ``path`` and close it."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
