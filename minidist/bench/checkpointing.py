"""Gradient checkpointing: activation memory against step time on a deep MLP.

    python -m minidist.bench.checkpointing           # 16 layers of width 512, batch 256, float32
    python -m minidist.bench.checkpointing --layers 9 --width 64 --batch 32 --steps 3

One training step (forward, cross-entropy, backward) three ways, on the
same weights and data: no checkpointing, every layer checkpointed (L
segments), and every √L layers (√L segments, ``checkpoint_sequential``).
For each: the peak bytes of activations the graph keeps at once
(``md.autograd.saved_bytes``: what the ops saved for backward and their
inputs, not the parameters nor the batch), and the median step time of
``--steps`` timed steps after ``--warmup``, and the best one, which other
jobs on a shared machine disturb least (the three take turns step by step,
so a change of load hits them alike).

Targets (Lecture 7; Chen et al. 2016): with k segments backward keeps the k
segments' inputs and one segment's graph of L/k layers, so at k = √L

1. peak memory <= 2√L / L of no checkpointing's (√L inputs, each at most a
   layer's activations, plus √L layers recomputed; here 2/√L = 0.5 at L = 16);
2. median step time <= 1.5x no checkpointing's: the price is one more
   forward pass (of all segments but the last, which is not checkpointed),
   and a forward is about a third of a step.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import numpy as np

from minidist.autograd import checkpoint_sequential, saved_bytes
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.util.arguments import integer

MEMORY_TARGET = "2 sqrt(L) / L"
TIME_TARGET = 1.5


def rows_for(layers: int) -> list[tuple[str, int | None]]:
    """(label, segments) of the three rows; None: no checkpointing."""
    root = math.isqrt(layers)
    return [("no checkpointing", None), (f"every layer: L = {layers} segments", layers),
            (f"sqrt(L) = {root} segments", root)]


def make_step(model: MLP, x: np.ndarray, y: np.ndarray, segments: int | None) -> Callable:
    def step() -> None:
        out = model(x) if segments is None else checkpoint_sequential(model, segments, x)
        cross_entropy(out, y).backward()
        for p in model.parameters():
            p.grad = None

    return step


def peak_saved_bytes(step: Callable[[], None]) -> int:
    with saved_bytes() as saved:
        step()
    return saved.peak


def step_times(steps: list[Callable[[], None]], repeats: int,
               warmup: int) -> list[tuple[float, float]]:
    """(median, best) seconds of each step, the steps taking turns."""
    times: list[list[float]] = [[] for _ in steps]
    for turn in range(warmup + repeats):
        for step, seconds in zip(steps, times, strict=True):
            start = time.perf_counter()
            step()
            if turn >= warmup:
                seconds.append(time.perf_counter() - start)
    return [(statistics.median(seconds), min(seconds)) for seconds in times]


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description="gradient checkpointing: memory and time")
    parser.add_argument("--layers", type=integer(1), default=16,
                        help="Linear layers of the MLP (L)")
    parser.add_argument("--width", type=integer(1), default=512)
    parser.add_argument("--batch", type=integer(1), default=256)
    parser.add_argument("--classes", type=integer(2), default=10)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--steps", type=integer(1), default=20,
                        help="timed steps (median reported)")
    parser.add_argument("--warmup", type=integer(0), default=3)
    args = parser.parse_args(argv)
    if args.layers < 4:
        raise SystemExit(f"--layers must be >= 4 (three distinct rows), got {args.layers}")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, args.width)).astype(args.dtype)
    y = rng.integers(0, args.classes, size=args.batch)
    model = MLP([args.width] * args.layers + [args.classes], dtype=args.dtype, rng=0)
    rows = [dict(label=label, segments=segments, step=make_step(model, x, y, segments))
            for label, segments in rows_for(args.layers)]
    for row in rows:
        row["peak"] = peak_saved_bytes(row["step"])
    for row, (median, best) in zip(rows, step_times([r["step"] for r in rows], args.steps,
                                                    args.warmup), strict=True):
        row["seconds"], row["best"] = median, best
    base = rows[0]

    print(f"MLP of {args.layers} layers, width {args.width}, batch {args.batch}, {args.dtype}; "
          f"forward + backward, {args.steps} steps: median and best")
    print(f"{'':30s}{'peak saved':>14s}{'x none':>8s}{'median':>12s}{'x none':>8s}"
          f"{'best':>12s}{'x none':>8s}")
    for row in rows:
        print(f"{row['label']:30s}{row['peak'] / 2**20:10.2f} MiB{row['peak'] / base['peak']:8.2f}"
              f"{row['seconds'] * 1e3:9.2f} ms{row['seconds'] / base['seconds']:8.2f}"
              f"{row['best'] * 1e3:9.2f} ms{row['best'] / base['best']:8.2f}")
    root = rows[2]
    memory_bound = 2 * math.isqrt(args.layers) / args.layers
    memory_ratio, time_ratio = root["peak"] / base["peak"], root["seconds"] / base["seconds"]
    print(f"target 1: {root['segments']} segments keep <= {MEMORY_TARGET} = {memory_bound:.2f}x "
          f"no checkpointing's peak ({memory_ratio:.2f}x): "
          f"{'met' if memory_ratio <= memory_bound else 'MISSED'}")
    print(f"target 2: {root['segments']} segments step <= {TIME_TARGET}x no checkpointing's "
          f"({time_ratio:.2f}x): {'met' if time_ratio <= TIME_TARGET else 'MISSED'}")
    return [{key: value for key, value in row.items() if key != "step"} for row in rows]


if __name__ == "__main__":
    main()
