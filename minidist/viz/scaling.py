"""The allreduce algorithms against the number of ranks: one panel per vector size.

``plot_scaling(table, ranks)`` draws what ``minidist.bench.scaling.sweep``
returns: modelled time against P, both on log scales, one line per
algorithm, so the crossovers (latency-bound trees and recursive doubling
for short vectors, the bandwidth-optimal ring for long ones) are read off
at a glance.
"""

from __future__ import annotations

import os

from minidist.viz.figure import pyplot, save

COLOURS = {"naive": "tab:gray", "ps": "tab:olive", "ring": "tab:blue", "tree": "tab:green",
           "double_tree": "tab:cyan", "recursive_doubling": "tab:red"}


def plot_scaling(table: dict[int, dict[str, list[float]]], ranks: list[int],
                 path: str | os.PathLike | None = None):
    """One panel per size of ``table`` (``{bytes: {algorithm: [seconds per P]}}``)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(table), figsize=(4.2 * len(table), 3.6), squeeze=False)
    for ax, (size, times) in zip(axes[0], table.items(), strict=True):
        for name, seconds in times.items():  # ps takes the ring's time, and naive the
            # ring's on the shortest vectors: drawn dashed on top, both stay in sight
            dashed = name in ("ps", "naive")
            ax.plot(ranks, seconds, marker=".", label="ps (= ring)" if name == "ps" else name,
                    color=COLOURS.get(name), linestyle="--" if dashed else "-",
                    zorder=3 if dashed else 2)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks P")
        ax.set_title(f"{size:,} bytes", loc="left")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("modelled time (s)")
    axes[0][-1].legend(fontsize="small", frameon=False)
    if path is not None:
        save(fig, path)
    else:
        fig.tight_layout()
    return fig
