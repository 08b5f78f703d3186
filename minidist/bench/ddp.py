"""How fast is data parallelism? Bucket sizes, overlap, scaling and a straggler, under MPI.

    python -m minidist.bench.ddp                       # restarts itself: mpiexec -n 2
    mpirun -n 2 python -m mpi4py -m minidist.bench.ddp --timeline ddp_timeline.png

Three measurements over ``--steps`` timed SGD steps (after warm-up), each
step timed by its slowest rank; the median step is reported, and the best
one, which other jobs on a shared machine disturb least. The variants of a
measurement take turns (``--rounds``), so a change of load hits them alike:

1. **Bucket size** on a deep MLP with ``--depth`` Linear layers (2 tensors
   each, 50 by default) and a small batch, where per-message costs matter:
   one allreduce per tensor, then buckets of growing size, then everything
   in one bucket, and the default buckets without overlap. For each: step
   time, its ratio to the per-tensor step, and the share of communication
   hidden behind backward (``DataParallel.last_step_stats``).
2. **Scaling** (weak: ``--batch`` samples per rank, so P ranks process P
   times more per step): efficiency = step time on 1 rank / step time on P
   ranks; 100% means communication is free or entirely hidden. The 1-rank
   step runs on rank 0 alone while the others wait. A third time, P ranks
   training separately, tells what sharing cores, caches and memory
   bandwidth costs even without a single message. (Medians only: the best
   step of P ranks needs all P undisturbed at once, which is rarer than one.)
3. **Straggler**: rank P-1 sleeps ``--delay`` s inside every step;
   synchronous training makes *every* rank's step that much slower. The
   trace of the last run is drawn with ``--timeline FILE.png``.

BLAS runs one thread per rank (OMP_NUM_THREADS=1), so P ranks use P cores.
On one host, "communication" is the CPU copying through shared memory, and
MPI spins while it waits: overlap pays off only when each rank has a core
to spare for its communication thread; with exactly one core per rank,
"no overlap" can be the fastest line of table 1. On a machine shared with
other jobs the figures move; run it twice.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from minidist.comm import Communicator, allreduce, world
from minidist.comm.transport.world import running_under_mpi
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD
from minidist.parallel.ddp import DataParallel
from minidist.parallel.timing import TraceRecorder
from minidist.util.arguments import image_file, integer, listing, number
from minidist.util.mpiexec import run_module_under_mpi

DEFAULT_BUCKETS = "25 MB, first 1 MB"  # DataParallel's defaults
BUCKET_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("one per tensor", dict(bucket_mb=0, first_bucket_mb=0)),
    ("0.25 MB", dict(bucket_mb=0.25, first_bucket_mb=0.25)),
    ("1 MB", dict(bucket_mb=1, first_bucket_mb=1)),
    (DEFAULT_BUCKETS, dict(bucket_mb=25, first_bucket_mb=1)),
    ("one bucket", dict(bucket_mb=float("inf"), first_bucket_mb=float("inf"))),
    ("25 MB, no overlap", dict(bucket_mb=25, first_bucket_mb=1, overlap=False)),
]


def timed_steps(c: Communicator, model: DataParallel | MLP, batch: int, steps: int,
                warmup: int, delay: float = 0.0, slow_rank: int = -1) -> dict[str, float]:
    """Train ``steps`` SGD steps on random data: median step time of the slowest rank
    (``step``), its fastest step (``best``: the least disturbed by other jobs), the
    median of this rank's own steps (``own_step``), the mean share of communication hidden.

    ``slow_rank`` sleeps ``delay`` s between forward and backward each step.
    ``model`` may also be a bare MLP: one process, no communication at all.
    """
    rng = np.random.default_rng(c.rank)
    sizes = model.module.sizes if isinstance(model, DataParallel) else model.sizes
    inputs, classes = sizes[0], sizes[-1]
    x = rng.normal(size=(batch, inputs)).astype(np.float32)
    y = rng.integers(0, classes, batch)
    opt = SGD(model.parameters(), lr=1e-3)
    times, overlap = [], []
    for step in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        if c.rank == slow_rank:
            time.sleep(delay)  # the straggler: same work, plus a pause
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - start
        if step >= warmup:
            times.append(seconds)
            overlap.append(getattr(model, "last_step_stats", {}).get("overlap_fraction", 0.0))
    # communication: every rank learns the slowest rank's time of each step
    slowest = allreduce(np.array(times), c, op="max", algorithm="mpi")
    return dict(step=statistics.median(slowest.tolist()), best=float(slowest.min()),
                own_step=statistics.median(times),
                overlap=statistics.mean(overlap))


def take_turns(measures: list[Callable[[], dict[str, float]]], rounds: int
               ) -> list[dict[str, float]]:
    """Run every measurement ``rounds`` times, taking turns, so that a change of machine
    load during the run hits them all alike; then combine each one's rounds: median
    of the medians, best of the bests."""
    runs: list[list[dict[str, float]]] = [[] for _ in measures]
    for _ in range(rounds):
        for measure, results in zip(measures, runs, strict=True):
            results.append(measure())
    return [dict(step=statistics.median(r["step"] for r in results),
                 best=min(r["best"] for r in results),
                 own_step=statistics.median(r["own_step"] for r in results),
                 overlap=statistics.mean(r["overlap"] for r in results)) for results in runs]


def bucket_sweep(c: Communicator, sizes: list[int], batch: int, steps: int, warmup: int,
                 rounds: int = 3) -> list[tuple[str, int, dict[str, float]]]:
    """Measurement 1: ``(label, buckets, timings)`` per bucket configuration."""
    models = [DataParallel(MLP(sizes, rng=0), c, **config) for _, config in BUCKET_CONFIGS]
    per_turn = max(1, steps // rounds)
    timings = take_turns([partial(timed_steps, c, model, batch, per_turn, warmup)
                          for model in models], rounds)
    return [(label, len(model.buckets), timing)
            for (label, _), model, timing in zip(BUCKET_CONFIGS, models, timings, strict=True)]


def scaling(c: Communicator, sizes: list[int], batch: int, steps: int, warmup: int,
            rounds: int = 3) -> list[dict[str, float]]:
    """Measurement 2: timings of rank 0 alone, of all P ranks training separately (no
    message: what sharing the machine costs), of all P ranks with DDP, and with DDP
    without overlap.

    The single rank trains the bare model: no buckets, no thread, no message.
    """
    alone = c.split(c.rank, 0)  # communication: P communicators of one rank each
    per_turn = max(1, steps // rounds)

    def single() -> dict[str, float]:
        result = dict(step=0.0, best=0.0, own_step=0.0, overlap=0.0)  # ranks other than 0
        if c.rank == 0:
            result = timed_steps(alone, MLP(sizes, rng=0), batch, per_turn, warmup)
        c.barrier()  # the other ranks wait here while rank 0 measures
        return result

    def ddp(**options: Any) -> Callable[[], dict[str, float]]:
        model = DataParallel(MLP(sizes, rng=0), c, **options)
        return partial(timed_steps, c, model, batch, per_turn, warmup)

    separate = partial(timed_steps, c, MLP(sizes, rng=0), batch, per_turn, warmup)
    return take_turns([single, separate, ddp(), ddp(overlap=False)], rounds)


def straggler_trial(c: Communicator, sizes: list[int], batch: int, steps: int, delay: float,
                    slow_rank: int, warmup: int = 2) -> dict[str, Any]:
    """Measurement 3: step times with ``slow_rank`` delayed, and this rank's trace.

    Works on any transport (``md.launch(straggler_trial, ..., backend="local")``).
    """
    recorder = TraceRecorder(c.rank)
    model = DataParallel(MLP(sizes, rng=0), c, recorder=recorder)
    if warmup:
        timed_steps(c, model, batch, warmup, 0)  # warm-up, not recorded
    recorder.start(c)
    result = timed_steps(c, model, batch, steps, 0, delay, slow_rank)
    return dict(result, trace=recorder.to_list())


def report(c: Communicator, args: argparse.Namespace) -> None:
    say = print if c.rank == 0 else (lambda *a, **k: None)
    say(f"DDP benchmark: {c.size} MPI ranks, one BLAS thread each, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    deep = [args.width] * args.depth + [10]
    say(f"\n1. bucket size: MLP of {args.depth} layers of width {args.width} "
        f"({2 * args.depth} tensors), batch {args.small_batch} per rank")
    say(f"{'buckets':>20} {'count':>6} {'median ms':>10} {'best ms':>8} "
        f"{'vs per-tensor (median, best)':>29} {'hidden':>7}")
    rows = bucket_sweep(c, deep, args.small_batch, args.steps, args.warmup, args.rounds)
    base = rows[0][2]
    for label, count, t in rows:
        say(f"{label:>20} {count:>6} {1e3 * t['step']:10.2f} {1e3 * t['best']:8.2f} "
            f"{t['step'] / base['step']:21.2f}x {t['best'] / base['best']:5.2f}x "
            f"{t['overlap']:7.0%}")
    best_label, _, best = min(rows[1:], key=lambda row: row[2]["step"])
    default = next(t for label, _, t in rows if label == DEFAULT_BUCKETS)
    met = "met" if best["step"] <= 0.7 * base["step"] else "MISSED"
    say(f"target: bucketed step <= 0.7x the per-tensor step (median): {met} by {best_label!r} "
        f"({best['step'] / base['step']:.2f}x); the default buckets "
        f"{default['step'] / base['step']:.2f}x")

    wide = args.sizes
    say(f"\n2. scaling: MLP {wide}, batch {args.batch} per rank (weak scaling)")
    timings = scaling(c, wide, args.batch, args.steps, args.warmup, args.rounds)
    say(f"{'':>36} {'median ms':>10} {'efficiency':>11}")
    labels = ["1 rank", f"{c.size} ranks apart (no message)", f"{c.size} ranks, DDP",
              f"{c.size} ranks, DDP without overlap"]
    one = timings[0]  # measured on rank 0 only, which does the printing
    for label, t in zip(labels, timings, strict=True) if c.rank == 0 else ():
        say(f"{label:>36} {1e3 * t['step']:10.1f} {one['step'] / t['step']:11.0%}")
    if c.rank == 0 and c.size == 2:
        efficiency = one["step"] / timings[2]["step"]
        say(f"target: efficiency at P = 2 >= 85% (DDP): "
            f"{'met' if efficiency >= 0.85 else 'MISSED'} ({efficiency:.0%})")

    say(f"\n3. straggler: rank {c.size - 1} sleeps {1e3 * args.delay:.0f} ms per step")
    traces: dict[float, list] = {}

    def trial(delay: float) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            result = straggler_trial(c, wide, args.batch, max(1, args.steps // args.rounds),
                                     delay, c.size - 1)
            traces[delay] = result.pop("trace")  # the last round's trace is drawn
            return result
        return run

    base, slow = take_turns([trial(0.0), trial(args.delay)], args.rounds)
    say(f"median step {1e3 * base['step']:.1f} ms without, {1e3 * slow['step']:.1f} ms with "
        f"(+{1e3 * (slow['step'] - base['step']):.1f} ms on every rank)")
    gathered = c.mpi_comm.gather(traces[args.delay], root=0) if hasattr(c, "mpi_comm") \
        else [traces[args.delay]]
    if c.rank == 0 and args.timeline:
        from minidist.viz.timeline import plot_timeline

        plot_timeline(gathered, args.timeline,
                      title=f"DDP, rank {c.size - 1} delayed {1e3 * args.delay:.0f} ms per step")
        say(f"timeline written to {args.timeline}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=integer(1), default=2, help="P when it restarts itself")
    parser.add_argument("--steps", type=integer(1), default=20)
    parser.add_argument("--warmup", type=integer(0), default=3, help="untimed steps per turn")
    parser.add_argument("--rounds", type=integer(1), default=3,
                        help="the variants of a measurement take turns this many times")
    parser.add_argument("--depth", type=integer(1), default=25, help="layers of the deep MLP")
    parser.add_argument("--width", type=integer(1), default=128)
    parser.add_argument("--small-batch", type=integer(1), default=32)
    parser.add_argument("--sizes", type=listing(integer(1)), default="784,1024,1024,10",
                        help="the scaling MLP")
    parser.add_argument("--batch", type=integer(1), default=512, help="per rank, for scaling")
    parser.add_argument("--delay", type=number(least=0), default=0.05, help="straggler's sleep (s)")
    parser.add_argument("--timeline", type=image_file, default=None,
                        help="PNG of the straggler's trace")
    args = parser.parse_args(argv)
    if not running_under_mpi():
        return run_module_under_mpi("minidist.bench.ddp", args.ranks, argv)
    report(world(), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
