"""The rows and the targets that ``bench.glove`` prints: each trainer's speed and memory,
then each target met or missed, from the figures of one run."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

MB = 2**20


def report(name: str, threads: int, result: dict[str, Any], records: int,
           reference: dict[str, Any] | None) -> float:
    """One row of the table; returns M records/s."""
    seconds = statistics.median(result["seconds"])
    rate = records / seconds / 1e6
    ratio = ""
    if reference is not None:
        ratio = f"{reference['seconds_median'] / seconds:6.2f}x"
    added = result["peak"] - result["baseline"]
    print(f"{name:<22} {threads:>3} {seconds:8.2f} {rate:8.3f} {rate / threads:8.3f} "
          f"{ratio:>7} {result['peak']:8.0f} {added:8.0f}   "
          + " ".join(f"{c:.6f}" for c in result["costs"]), flush=True)
    return rate


def device_target(figures: dict[str, Any], device: str, dim: int) -> None:
    """The device's records/s against one CPU core's best, met or missed. A device row
    counts only if it trains as the CPU's loop does: its last cost within 5 % of it."""
    cpu = {name: figures[f"{key}_rate"] for key, name in
           (("records1", "the record loop"), ("minibatch", "the mini-batch trainer"))
           if f"{key}_rate" in figures}
    if not cpu:
        print("target 4: no one-thread CPU trainer ran (--threads 1, no --no-minibatch)")
        return
    best = max(cpu, key=cpu.__getitem__)
    loop_cost = figures["records1"]["costs"][-1] if "records1" in figures else None
    trains = {key: abs(figures[key]["costs"][-1] / loop_cost - 1) <= 0.05 if loop_cost
              else True for key in figures if key.startswith("device_") and
              not key.endswith("_rate")}
    for key, ok in trains.items():
        if not ok:
            print(f"{key[7:]}: its last cost {figures[key]['costs'][-1]:.6f} is not within 5 % "
                  f"of the CPU loop's {loop_cost:.6f}: not counted (it does not train as the "
                  "loop does: README, GloVe on a GPU)")
    if not any(trains.values()):
        print(f"target 4: {device} >= 10x one CPU core: no device row trained: "
              f"{'not a device (the CI guard)' if device == 'strict' else 'missed'}")
        return
    fastest = max((key for key, ok in trains.items() if ok),
                  key=lambda key: figures[f"{key}_rate"])
    ratio = figures[f"{fastest}_rate"] / cpu[best]
    verdict = "met" if ratio >= 10 else "missed"
    if device == "strict":
        verdict = "not a device: the CI guard's stand-in on the CPU, its speed means nothing"
    elif dim != 100:
        verdict += f" (at d = {dim}; the target is at d = 100)"
    print(f"target 4: {device} ({fastest[7:]}) >= 10x one CPU core ({best}, "
          f"{cpu[best]:.3f} M rec/s): {ratio:.2f}x: {verdict}")


def targets(figures: dict[str, Any], threads: list[int], n: int, words: int, dim: int) -> None:
    """The issue's targets, each met or missed, from the figures of this run."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    print()
    if "c1_rate" in figures and "records1_rate" in figures:
        ratio = figures["records1_rate"] / figures["c1_rate"]
        print(f"target 1: record loop >= 1.0x glove.c on one thread: {ratio:.2f}x: "
              f"{verdict(ratio >= 1.0)}")
    if "records1_rate" in figures and "records2_rate" in figures:
        speedup = figures["records2_rate"] / figures["records1_rate"]
        extra = ""
        if "c1_rate" in figures and "c2_rate" in figures:
            extra = f" (glove.c: {figures['c2_rate'] / figures['c1_rate']:.2f}x)"
        print(f"target 2: 2 threads >= 1.7x one: {speedup:.2f}x{extra}: "
              f"{verdict(speedup >= 1.7)}")
    bound = (2 * 16 * n + 4 * 8 * words * (dim + 1)) / MB
    added = max(figures[f"records{t}"]["peak"] - figures[f"records{t}"]["baseline"]
                for t in threads)
    print(f"target 3: memory added by training <= 2 x records + model = {bound:.0f} MB: "
          f"{added:.0f} MB: {verdict(added <= bound)}")
    if "c1" in figures and "records1" in figures:
        ours, theirs = np.array(figures["records1"]["costs"]), np.array(figures["c1"]["costs"])
        gap = np.max(np.abs(ours - theirs))
        print(f"cost per epoch on one thread, same start and records: largest gap to glove.c "
              f"{gap:.1e}, {'within' if gap <= 5e-7 else 'beyond'} its 6 printed decimals")
