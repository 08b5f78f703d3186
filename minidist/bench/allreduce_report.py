"""What ``bench.allreduce`` makes of its rows: sizes as the table names them, the
targets met or missed, the CSV and the plot of busbw against size."""

from __future__ import annotations

from pathlib import Path

from minidist.bench.pricing import RAW_MPI
from minidist.viz.figure import pyplot, save


def format_size(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def model_agreement(rows: list[dict], key: str, name: str) -> list[str]:
    """Target 2 for the model in column ``key``: rows from 64 KiB up within +-30%."""
    large = [row for row in rows if row["bytes"] >= 64 << 10]
    if not large:
        return []
    off = [row for row in large if abs(row[key] / row["time_s"] - 1) > 0.3]
    worst = max(large, key=lambda row: abs(row[key] / row["time_s"] - 1))
    inside = {algorithm: [row for row in large if row["algorithm"] == algorithm]
              for algorithm in dict.fromkeys(row["algorithm"] for row in large)}
    return [f"target 2: {name} within +-30% on {len(large) - len(off)} of {len(large)} rows "
            f">= 64 KiB (worst {worst['algorithm']} at {format_size(worst['bytes'])}: "
            f"{worst[key] / worst['time_s']:.2f}): {'met' if not off else 'MISSED'}",
            "          per algorithm: " + ", ".join(
                f"{algorithm} {sum(row not in off for row in mine)}/{len(mine)}"
                for algorithm, mine in inside.items()),
            "          outside: " + (", ".join(
                f"{row['algorithm']} {format_size(row['bytes'])} {row[key] / row['time_s']:.2f}"
                for row in off) or "none")]


def targets(rows: list[dict]) -> list[str]:
    """The communication layer's benchmark targets, each as a line that says if it holds.

    1. tree and recursive doubling at 8 B within 3x MPI_Allreduce's time;
    2. the model within +-30% of the measurement for every row from 64 KiB up (both
       models: independent links, and the shared memory bus);
    3. ring at 64 MiB at least 1.5x MPI_Allreduce's busbw.
    """
    found = {(row["algorithm"], row["bytes"]): row for row in rows}
    lines = []
    mpi_small = found.get((RAW_MPI, 8))
    for algorithm in ("tree", "recursive_doubling"):
        if mpi_small and (algorithm, 8) in found:
            ratio = found[algorithm, 8]["time_s"] / mpi_small["time_s"]
            lines.append(f"target 1: {algorithm} at 8 B is {ratio:.1f}x MPI_Allreduce "
                         f"(<= 3x): {'met' if ratio <= 3 else 'MISSED'}")
    lines += model_agreement(rows, "model_s", "model (independent links)")
    lines += model_agreement(rows, "bus_model_s", "model with the shared bus")
    ring, mpi_large = found.get(("ring", 64 << 20)), found.get((RAW_MPI, 64 << 20))
    if ring and mpi_large:
        ratio = ring["busbw_GBps"] / mpi_large["busbw_GBps"]
        lines.append(f"target 3: ring at 64 MiB has {ratio:.2f}x MPI_Allreduce's busbw "
                      f"(>= 1.5x): {'met' if ratio >= 1.5 else 'MISSED'}")
    return lines


def write_csv(rows: list[dict], path: str) -> None:
    keys = list(rows[0])
    lines = [",".join(keys)] + [",".join(str(row[k]) for k in keys) for row in rows]
    Path(path).write_text("\n".join(lines) + "\n")


def plot(rows: list[dict], path: str) -> None:
    """busbw against size, one line per algorithm."""
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for algorithm in dict.fromkeys(row["algorithm"] for row in rows):
        mine = [row for row in rows if row["algorithm"] == algorithm]
        ax.plot([r["bytes"] for r in mine], [r["busbw_GBps"] for r in mine], "o-",
                label=algorithm, markersize=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per rank")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"allreduce, P = {rows[0]['world_size']}")
    ax.grid(True, alpha=0.3)
    ax.legend()
    save(fig, path)
