"""Model parallelism benchmark: a tensor-parallel block against one process; ZeRO; MoE.

    python -m minidist.bench.model_parallel            # restarts itself: mpiexec -n 2
    python -m minidist.bench.model_parallel --quick    # a small run (the test suite's)
    mpirun -n 2 python -m mpi4py -m minidist.bench.model_parallel --widths 1024
    python -m minidist.bench.model_parallel --part counts    # parts 2 and 3 alone

**1. Tensor parallelism**, on MPI processes. The block is ``ParallelMLP``
(``minidist.parallel.tensor_parallel``): y = relu(x W1^T + b1) W2^T + b2 with
4d hidden units, on ``--tokens`` tokens (batch x sequence, flattened) of
width d, float32. A step is its forward and backward (a fixed upstream
gradient; the weights' and the input's gradients computed); for each width
d of ``--widths``, four measurements take turns ``--rounds`` times (a
change of load hits them alike):

a. **one process**: rank 0 runs the whole block, on a communicator of its
   own, while the other ranks wait (yielding their cores: when it restarts
   itself, MPICH gets ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1``);
b. **TP = P**: every rank its 1/P of the hidden units, one allreduce of the
   n x d output forward and one of the input's gradient backward;
c. **TP compute**: every rank runs its slice alone, at the same time: the
   arithmetic of b without its two messages;
d. **2 allreduces**: ``comm.allreduce`` of n x d float32 twice, as the block
   calls it (ring, no agreement check), a fresh input each time.

A step is timed by its slowest rank, between barriers; the median of
``--steps`` steps per turn (after ``--warmup``) over the turns is shown, and
the best step (the least disturbed by other jobs). The allreduce share is
row d's time over row b's. Flops per step: 12·n·d·h (forward 4ndh, backward 8ndh), h = 4d;
the allreduces move 2 x 2(P-1)/P·n·d values per rank: compute grows as d²,
communication as d, so the share shrinks as the block widens.

Target, at the widest block (compute dominates: d = 1024, 2048 tokens,
about 100 GFLOP a step against 2 x 8 MiB allreduced): the TP = 2 step
<= 0.75x one process's. Each rank does half the flops, so the ideal is
0.5x plus the allreduces; 0.75 leaves room for what two processes sharing
memory bandwidth and caches lose. On a machine shared with other jobs the
figures move; run it twice.

**2. ZeRO**: the bytes of model states each rank holds and sends per step
under DDP, ZeRO-1 and ZeRO-2 (``minidist.bench.zero``'s table), and **3. MoE**:
the all-to-all bytes per step of an expert-parallel layer and the tokens per
expert (``minidist.bench.moe``'s tables). Both are counted on in-process
ranks, beside their formulas: the same figures on every machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from minidist.autograd import Tensor
from minidist.bench import moe, zero
from minidist.comm import Communicator, LocalCommunicator, allreduce, world
from minidist.parallel.tensor_parallel import ParallelMLP
from minidist.util.arguments import integer, parse_quick
from minidist.util.mpiexec import run_module_under_mpi

DTYPE = np.dtype(np.float32)
TARGET = 0.75
ROWS = ("one process", "TP", "TP compute", "2 allreduces")


def block_step(layer: ParallelMLP, x: np.ndarray, upstream: np.ndarray) -> Callable[[], None]:
    """One forward and backward of ``layer`` (the weights' and the input's gradients)."""
    def step() -> None:
        for p in layer.parameters():
            p.grad = None
        layer(Tensor(x, requires_grad=True)).backward(upstream)

    return step


def allreduces_step(c: Communicator, x: np.ndarray) -> tuple[Callable[[], None], ...]:
    """The block's two allreduces of n x d values (its output, its input's gradient), and
    what rewrites their inputs before each step (untimed): in the block, both were just
    computed, and a just-written buffer is slower to copy than one only read."""
    inputs = [x.copy(), x.copy()]

    def prepare() -> None:
        for arr in inputs:
            np.add(arr, 0, out=arr)

    def step() -> None:
        for arr in inputs:
            allreduce(arr, c, check=False)

    return prepare, step


def timed(c: Communicator, step: Callable[[], None] | None, steps: int, warmup: int,
          prepare: Callable[[], None] | None = None) -> list[float]:
    """Each step's time on its slowest rank; ranks with ``step`` None only wait.
    ``prepare`` runs before each step, untimed."""
    mine = []
    for i in range(warmup + steps):
        if prepare is not None:
            prepare()
        c.barrier()  # every step starts together
        start = time.perf_counter()
        if step is not None:
            step()
        if i >= warmup:
            mine.append(time.perf_counter() - start)
    # communication: every rank learns the slowest rank's time of each step
    return allreduce(np.array(mine), c, op="max").tolist()


def measure_width(c: Communicator, alone: Communicator, d: int,
                  args: argparse.Namespace) -> dict[str, tuple]:
    """The four measurements at width d (``alone``: this rank's own communicator):
    {row: (median, best) seconds}."""
    hidden, n = 4 * d, args.tokens
    rng = np.random.default_rng(0)  # the same whole weights and data on every rank
    w1 = (rng.standard_normal((hidden, d)) / np.sqrt(d)).astype(DTYPE)
    w2 = (rng.standard_normal((d, hidden)) / np.sqrt(hidden)).astype(DTYPE)
    b1, b2 = np.zeros(hidden, DTYPE), np.zeros(d, DTYPE)
    x = rng.standard_normal((n, d)).astype(DTYPE)
    upstream = rng.standard_normal((n, d)).astype(DTYPE)
    part = slice(c.rank * hidden // c.size, (c.rank + 1) * hidden // c.size)
    steps = {  # row: (prepare, step)
        "one process": (None, block_step(ParallelMLP(w1, b1, w2, b2, alone), x, upstream)
                        if c.rank == 0 else None),
        "TP": (None, block_step(ParallelMLP(w1, b1, w2, b2, c), x, upstream)),
        "TP compute": (None, block_step(ParallelMLP(w1[part], b1[part], w2[:, part], b2,
                                                    alone), x, upstream)),
        "2 allreduces": allreduces_step(c, x),
    }
    times: dict[str, list[float]] = {row: [] for row in ROWS}
    for _ in range(args.rounds):
        for row in ROWS:
            prepare, step = steps[row]
            times[row] += timed(c, step, args.steps, args.warmup, prepare)
    return {row: (statistics.median(t), min(t)) for row, t in times.items()}


def report(c: Communicator, args: argparse.Namespace) -> list[dict]:
    """Measure every width; rank 0 prints the table and the target."""
    alone = c.split(color=c.rank)  # communication: a communicator of one rank each
    results = [dict(d=d, **measure_width(c, alone, d, args)) for d in args.widths]
    if c.rank != 0:
        return results
    p = c.size
    print(f"# 1. tensor-parallel MLP block (hidden 4d) at TP = {p} vs one process: "
          f"{args.tokens} tokens, float32, forward + backward; median (best) of "
          f"{args.rounds} x {args.steps} steps in ms; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores")
    print(f"{'d':>5} {'one process':>17} {f'TP = {p}':>17} {'TP / one':>9} "
          f"{'TP compute':>17} {'2 allreduces':>17} {'allreduce share':>16} "
          f"{'GFLOP/s one, TP':>16}")
    for r in results:
        flops = 12 * args.tokens * r["d"] * 4 * r["d"]
        one, tp = r["one process"][0], r["TP"][0]
        print(f"{r['d']:>5} " + " ".join(f"{1e3 * r[row][0]:8.1f} ({1e3 * r[row][1]:6.1f})"
                                         for row in ROWS[:2])
              + f" {tp / one:8.2f}x "
              + " ".join(f"{1e3 * r[row][0]:8.1f} ({1e3 * r[row][1]:6.1f})"
                         for row in ROWS[2:])
              + f" {r['2 allreduces'][0] / tp:16.1%} {flops / one / 1e9:8.1f}, "
                f"{flops / tp / 1e9:5.1f}")
    widest = results[-1]
    ratio = widest["TP"][0] / widest["one process"][0]
    print(f"target: TP = {p} step <= {TARGET}x one process's at d = {widest['d']} (median): "
          f"{'met' if ratio <= TARGET else 'MISSED'} ({ratio:.2f}x)", flush=True)
    return results


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=integer(1), default=2, help="P when it restarts itself")
    parser.add_argument("--widths", type=integer(1), nargs="+", default=[256, 512, 1024],
                        help="the blocks' widths d (the target: the last)")
    parser.add_argument("--tokens", type=integer(1), default=2048, help="batch x sequence")
    parser.add_argument("--steps", type=integer(1), default=5, help="timed steps per turn")
    parser.add_argument("--warmup", type=integer(0), default=1, help="untimed steps per turn")
    parser.add_argument("--rounds", type=integer(1), default=2,
                        help="the measurements take turns this many times")
    parser.add_argument("--part", choices=("tp", "counts"), default=None,
                        help="part 1 alone (tp) or parts 2 and 3 alone (default: all)")
    parser.add_argument("--quick", action="store_true", help="a small, fast run (tests)")
    return parse_quick(parser, argv, widths=[32, 64], tokens=128, steps=2, rounds=1)


def counted_tables(quick: bool) -> None:
    """Parts 2 and 3: ZeRO's and MoE's benchmarks, as they print them (in-process ranks)."""
    print("\n# 2. ZeRO: model states held and bytes sent per rank (python -m minidist.bench.zero)")
    zero.main(["--ranks", "1,2", "--sizes", "8,16,4"] if quick else [])
    print("\n# 3. MoE: all-to-all bytes and tokens per expert (python -m minidist.bench.moe)")
    moe.main(["--ranks", "2", "--experts", "4", "--tokens", "32", "--d-model", "8",
              "--hidden", "16"] if quick else [])


def check_ranks(p: int, widths: list[int]) -> None:
    """Part 1 cuts each block's 4d hidden units over the P ranks."""
    if p < 2 or any(4 * d % p for d in widths):
        raise SystemExit(f"bench.model_parallel: needs P >= 2 ranks dividing every "
                         f"block's 4d hidden units; got P = {p}, widths {widths}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    c = world()
    if isinstance(c, LocalCommunicator):  # not under MPI: part 1 under mpiexec, then 2 and 3
        code = 0
        if args.part in (None, "tp"):
            check_ranks(args.ranks, args.widths)  # before any rank starts: said once
            # the ranks that wait while rank 0 runs alone yield their core instead of spinning
            os.environ.setdefault("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")
            code = run_module_under_mpi("minidist.bench.model_parallel", args.ranks,
                                        [*argv, "--part", "tp"])
        if code == 0 and args.part in (None, "counts"):
            counted_tables(args.quick)
        return code
    if args.part in (None, "tp"):
        check_ranks(c.size, args.widths)
        report(c, args)
    if c.rank == 0 and args.part in (None, "counts"):
        counted_tables(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
