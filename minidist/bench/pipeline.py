"""Pipeline parallelism: throughput against naive model parallelism, the bubble, activation memory.

    python -m minidist.bench.pipeline           # launches its MPI ranks itself (md.launch)
    python -m minidist.bench.pipeline --quick   # a small run (the test suite's)

The model is a deep MLP of ``--depth`` Linear layers, ``--width`` wide
(float32, 10 classes), trained by SGD on a random batch of ``--batch`` rows;
``Pipeline`` cuts it into K stages balanced by parameters. Large matrices
keep the arithmetic far above the messages (a boundary activation of a
micro-batch is its rows x width; each stage computes rows x width² x layers).

1. **Throughput** at K = 2, M = ``--micro-batches`` on two MPI processes
   (``md.launch(..., backend="mpi")``). *Naive model parallelism* is the
   textbook one: the same two stages fed the whole mini-batch as one
   micro-batch (M = 1), so one stage computes while the other waits. Beside
   it, in the same run and taking turns (``--rounds``, so a change of load
   hits them alike): one process training the whole model (what naive model
   parallelism is worth: no faster), the naive schedule with M micro-batches
   (one at a time: still (K-1)/K idle, on smaller matrices), GPipe and 1F1B.
   A step is timed by its slowest rank; the median step is reported, and
   the best (the least disturbed by other jobs); examples/s is the batch
   over the median. Ideal GPipe/1F1B speed-up over naive: K·M/(M+K-1) =
   1.78x at K = 2, M = 8, less what the smaller matrices of micro-batches
   lose (or plus what they gain: a micro-batch's activations stay in cache).
2. **Bubble** per stage, 1 - busy/span, against (K-1)/(M+K-1), on the
   in-process transport's modelled clock (each step declares its work: a
   forward 1 unit per row, a backward 2), for K in {2, 4} and M in {1, 4, 8,
   16}: the formula's setting, equal stages.
3. The same on the two MPI processes, from the steps' wall-clock trace (the
   busy time leaves the waits out), median of ``--bubble-steps`` steps. Real stages
   are not equal: the last one also computes the loss, and the first one
   skips the gradient of its input (the batch needs none), so the first
   stage's backward is shorter and it waits for the second's gradients: its
   bubble grows with M, the second's (the busiest) follows the formula.
4. **Peak activation memory** per stage at K = 4, M = ``--micro-batches``,
   in-process: GPipe, 1F1B and both with re-materialisation.
   ``saved_bytes`` counts what the graph keeps for backward (not leaves: the
   stage's input is one, so the stage inputs a rank holds, the most
   micro-batches held at once x one micro-batch's input, are a column of
   their own; with re-materialisation they are most of what is kept
   between a micro-batch's F and B).

Targets: (1, 2) GPipe and 1F1B >= 1.6x naive's examples/s (median step);
(3) every stage's modelled bubble within ±5 points of the formula; (4) the
busiest stage's MPI bubble (the least idle: the stage that sets the pace)
within ±5 points of it; (5) 1F1B's peak saved bytes on each stage <= K/M of
GPipe's (at most K micro-batches in flight instead of M); (6) with
re-materialisation, graph plus held inputs < 1/2 of GPipe's on every stage.
On a machine shared with other jobs the timings move; run it twice.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import minidist as md
from minidist.autograd import Tensor, saved_bytes
from minidist.comm import Communicator, LocalCluster, allreduce
from minidist.comm.transport.world import running_under_mpi
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.optim import SGD
from minidist.parallel.pipeline import Pipeline, bubble_formula, bubbles
from minidist.util.arguments import integer, parse_quick

TOLERANCE = 0.05  # bubble targets: within 5 points of the formula


def deep_mlp(args: argparse.Namespace, dtype=np.float32) -> MLP:
    return MLP([args.width] * args.depth + [10], dtype=dtype, rng=0)


def random_batch(args: argparse.Namespace, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.normal(size=(args.batch, args.width)).astype(dtype),
            rng.integers(0, 10, args.batch))


# ---- on two MPI processes ----

def pipeline_steps(c: Communicator, pipe: Pipeline, x, y, steps: int, warmup: int) -> dict:
    """``steps`` SGD steps after ``warmup``: each step's slowest-rank seconds, and this
    rank's trace of each."""
    opt = SGD(pipe.parameters(), lr=1e-4)
    times, traces = [], []
    for step in range(warmup + steps):
        start = time.perf_counter()
        opt.zero_grad()
        pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
        opt.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
            traces.append(pipe.last_run.trace)
    # communication: every rank learns the slowest rank's time of each step
    return dict(times=allreduce(np.array(times), c, op="max").tolist(), traces=traces)


def one_process_steps(c: Communicator, model: MLP, x, y, steps: int, warmup: int) -> dict:
    """Rank 0 trains the whole model alone while the other ranks wait."""
    times = []
    if c.rank == 0:
        opt = SGD(model.parameters(), lr=1e-4)
        for step in range(warmup + steps):
            start = time.perf_counter()
            opt.zero_grad()
            cross_entropy(model(Tensor(x)), y).backward()
            opt.step()
            if step >= warmup:
                times.append(time.perf_counter() - start)
    c.barrier()
    return dict(times=times, traces=[])


VARIANTS = [("one process, whole model", None, 1), ("naive model parallelism (M = 1)", "naive", 1),
            ("naive schedule, M micro-batches", "naive", None), ("GPipe", "gpipe", None),
            ("1F1B", "1f1b", None)]


def on_mpi(c: Communicator, args: argparse.Namespace) -> dict:
    """Parts 1 and 3 on two MPI ranks: every variant's step times (taking turns), then
    the traces of GPipe and 1F1B at each M of ``args.bubble_m``."""
    x, y = random_batch(args)
    runs = []
    for _, schedule, m in VARIANTS:
        runs.append(Pipeline(deep_mlp(args), c, m or args.micro_batches, schedule=schedule)
                    if schedule else deep_mlp(args))
    times: list[list[float]] = [[] for _ in VARIANTS]
    for _ in range(args.rounds):
        for run, seconds in zip(runs, times, strict=True):
            step = one_process_steps if isinstance(run, MLP) else pipeline_steps
            seconds += step(c, run, x, y, args.steps, args.warmup)["times"]
    traces = {}
    for schedule in ("gpipe", "1f1b"):
        for m in args.bubble_m:
            pipe = Pipeline(deep_mlp(args), c, m, schedule=schedule)
            traces[schedule, m] = pipeline_steps(c, pipe, x, y, args.bubble_steps, 1)["traces"]
    return dict(times=times, traces=traces)


# ---- in-process ----

def modelled_trace(c: Communicator, schedule: str, micro_batches: int) -> list:
    """One mini-batch of 16 rows per micro-batch, each step declaring its work."""

    def work(step, rows):
        return rows * (1e-4 if step.phase == "F" else 2e-4)

    pipe = Pipeline(MLP([16] * 9, dtype=np.float64, rng=0), c, micro_batches,
                    schedule=schedule, work=work, clock=lambda: c.stats.clock)
    x = np.random.default_rng(0).normal(size=(16 * micro_batches, 16))
    pipe.train_step(x, np.zeros(len(x), dtype=np.int64))
    return pipe.last_run.trace


def held_memory(c: Communicator, args: argparse.Namespace, schedule: str,
                rematerialise: bool) -> tuple[int, int]:
    """This stage's peak saved bytes, and the bytes of the stage inputs it held at most."""
    x, y = random_batch(args)
    pipe = Pipeline(deep_mlp(args), c, args.micro_batches, schedule=schedule,
                    rematerialise=rematerialise)
    with saved_bytes() as saved:
        pipe.train_step(x if c.rank == 0 else None, y if pipe.is_last else None)
    micro_input = x.nbytes // args.micro_batches  # every stage's input is rows x width here
    return saved.peak, pipe.last_run.peak_in_flight * micro_input


# ---- report ----

def show_throughput(times: list[list[float]], args: argparse.Namespace) -> list[str]:
    print(f"# 1. throughput, K = 2 MPI processes, M = {args.micro_batches}: MLP of {args.depth} "
          f"layers of width {args.width}, batch {args.batch}, float32; median of "
          f"{args.rounds} x {args.steps} steps, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    print(f"{'':>34} {'median ms':>10} {'best ms':>8} {'examples/s':>11} "
          f"{'vs naive (median, best)':>24}")
    medians = [statistics.median(t) for t in times]
    naive = medians[1]
    for (label, _, _), seconds, median in zip(VARIANTS, times, medians, strict=True):
        print(f"{label.replace('M micro', f'{args.micro_batches} micro'):>34} "
              f"{1e3 * median:10.1f} {1e3 * min(seconds):8.1f} {args.batch / median:11.0f} "
              f"{naive / median:17.2f}x {min(times[1]) / min(seconds):5.2f}x")
    ideal = 2 * args.micro_batches / (args.micro_batches + 1)
    return [verdict(number, f"{label} >= 1.6x naive's examples/s ({naive / medians[i]:.2f}x "
                            f"on the median step, {min(times[1]) / min(times[i]):.2f}x on the "
                            f"best; ideal {ideal:.2f}x)", naive / medians[i] >= 1.6)
            for number, i, label in ((1, 3, "GPipe"), (2, 4, "1F1B"))]


def show_modelled_bubbles() -> list[str]:
    print("\n# 2. bubble per stage, on the in-process modelled clock (forward 1, backward 2)")
    print(f"{'K':>3} {'M':>3} {'formula':>8} {'GPipe, per stage':>30} {'1F1B, per stage':>30}")
    worst = 0.0
    for k in (2, 4):
        for m in (1, 4, 8, 16):
            cells = []
            for schedule in ("gpipe", "1f1b"):
                measured = bubbles(LocalCluster(k).run(modelled_trace,
                                                             args=(schedule, m), timeout=60))
                worst = max(worst, *(abs(b - bubble_formula(k, m)) for b in measured))
                cells.append(" ".join(f"{b:.1%}" for b in measured))
            print(f"{k:>3} {m:>3} {bubble_formula(k, m):8.1%} {cells[0]:>30} {cells[1]:>30}")
    return [verdict(3, f"modelled bubble within ±{100 * TOLERANCE:.0f} points of (K-1)/(M+K-1) "
                       f"(worst {100 * worst:.1f} points)", worst <= TOLERANCE)]


def show_mpi_bubbles(traces: dict) -> list[str]:
    print("\n# 3. bubble per stage on 2 MPI processes (wall-clock trace, waits left out), "
          "median over the steps")
    print(f"{'M':>3} {'formula':>8} {'GPipe, per stage':>20} {'1F1B, per stage':>20}")
    worst = 0.0
    for m in sorted({m for _, m in traces}):
        cells = []
        for schedule in ("gpipe", "1f1b"):
            steps = [bubbles(list(ranks)) for ranks in traces[schedule, m]]
            measured = [statistics.median(stage) for stage in zip(*steps, strict=True)]
            worst = max(worst, abs(min(measured) - bubble_formula(2, m)))  # the busiest stage
            cells.append(" ".join(f"{b:.1%}" for b in measured))
        print(f"{m:>3} {bubble_formula(2, m):8.1%} {cells[0]:>20} {cells[1]:>20}")
    return [verdict(4, f"the busiest stage's MPI bubble within ±{100 * TOLERANCE:.0f} points "
                       f"of (K-1)/(M+K-1) (worst {100 * worst:.1f} points)", worst <= TOLERANCE)]


def show_memory(args: argparse.Namespace) -> list[str]:
    k, m = 4, args.micro_batches
    print(f"\n# 4. peak activation memory per stage, K = {k}, M = {m}, in-process (MiB): "
          "saved by the graph + stage inputs held")
    rows = {}
    for label, schedule, remat in (("GPipe", "gpipe", False), ("1F1B", "1f1b", False),
                                   ("GPipe, re-materialised", "gpipe", True),
                                   ("1F1B, re-materialised", "1f1b", True)):
        rows[label] = LocalCluster(k).run(held_memory, args=(args, schedule, remat),
                                          timeout=600)
        print(f"{label:>24} " + "  ".join(f"{graph / 2**20:7.2f} + {held / 2**20:5.2f}"
                                          for graph, held in rows[label]))
    gpipe, one_f = rows["GPipe"], rows["1F1B"]
    remat = [graph + held for graph, held in rows["GPipe, re-materialised"]]
    return [verdict(5, f"1F1B's peak saved bytes <= K/M = {k}/{m} of GPipe's on every stage "
                       f"(worst {max(o[0] / g[0] for o, g in zip(one_f, gpipe, strict=True)):.2f})",
                    all(o[0] <= k / m * g[0] for o, g in zip(one_f, gpipe, strict=True))),
            verdict(6, f"re-materialised GPipe keeps < 1/2 of GPipe's on every stage (worst "
                       f"{max(r / sum(g) for r, g in zip(remat, gpipe, strict=True)):.2f})",
                    all(r < sum(g) / 2 for r, g in zip(remat, gpipe, strict=True)))]


def verdict(number: int, text: str, met: bool) -> str:
    return f"target {number}: {text}: {'met' if met else 'MISSED'}"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small, fast run (tests)")
    parser.add_argument("--width", type=integer(1), default=1024)
    parser.add_argument("--depth", type=integer(3), default=9,
                        help="Linear layers (part 4 cuts the 2 x depth - 1 layers into four "
                             "stages: at least 3)")
    parser.add_argument("--batch", type=integer(1), default=2048)
    parser.add_argument("--micro-batches", type=integer(1), default=8, help="M")
    parser.add_argument("--steps", type=integer(1), default=2, help="timed steps per turn")
    parser.add_argument("--warmup", type=integer(0), default=1, help="untimed steps per turn")
    parser.add_argument("--rounds", type=integer(1), default=5, help="turns of the throughput part")
    parser.add_argument("--bubble-steps", type=integer(1), default=5,
                        help="traced steps per MPI bubble")
    parser.set_defaults(bubble_m=[1, 4, 8, 16])
    args = parse_quick(parser, argv, width=32, batch=64, steps=1, rounds=1, bubble_m=[1, 4],
                       bubble_steps=1)
    if args.micro_batches > args.batch:
        parser.error(f"--micro-batches {args.micro_batches}: at most the batch of {args.batch}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if running_under_mpi():
        raise SystemExit("bench.pipeline starts its own MPI processes (md.launch): run it "
                         "without mpirun")
    results = md.launch(on_mpi, 2, args=(args,), backend="mpi", timeout=1200)
    lines = show_throughput(results[0]["times"], args)
    lines += show_modelled_bubbles()
    traces = {key: list(zip(results[0]["traces"][key], results[1]["traces"][key], strict=True))
              for key in results[0]["traces"]}
    lines += show_mpi_bubbles(traces)
    lines += show_memory(args)
    print("\n" + "\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
