"""Allreduce benchmark: every algorithm and MPI's own, from 8 B to 64 MiB, beside the model.

    python -m minidist.bench.allreduce -n 2                      # launches itself under mpiexec
    mpirun -n 4 python -m mpi4py -m minidist.bench.allreduce     # or run it under MPI directly
    python -m minidist.bench.allreduce -n 2 --sizes 8,64K,64M --algorithms ring,mpi --csv out.csv
    python -m minidist.bench.fit && python -m minidist.bench.allreduce -n 2 --fit saved

For each size and algorithm: a few warm-up calls, then ``--iters`` timed
calls, each between two barriers; a call's time is the slowest rank's, and
the table shows the median over calls. As in nccl-tests, ``algbw = bytes /
time`` and ``busbw = algbw · 2(P-1)/P``: the bandwidth each link would need
for a ring to take that long, comparable across P. Beside each measurement
stands the α-β-γ model's prediction (``comm.cost``; MPI's by
``cost.mpich.mpich_time``, with MPI's own reduction and copy speeds from the
same fit), twice: with every link independent (the model the in-process
clock follows) and with the ranks sharing the host's memory bus
(``NetworkModel.sharing``). The fit is taken in the same run: before the
timings of each size, ``bench.fit.fit`` measures α, β, γ, MPI's prices and
the bus at that size (``--fit each``, the default; about 1 s a size, more
at 64 MiB), because this machine's memory bandwidth moves within minutes
and a model is only as good as a fit taken in the conditions of the run.
``--fit saved`` uses the fit saved by ``python -m minidist.bench.fit``.
The result goes into a preallocated array (``out=``), as MPI_Allreduce's
receive buffer is, the input is rewritten before each call (untimed: a
training step reduces a gradient it has just computed), and the agreement
check runs as in normal use. The row
``MPI_Allreduce`` is the baseline: mpi4py's ``Allreduce`` called directly;
``mpi`` is the same call through ``comm.allreduce`` (with its check).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time

import numpy as np

from minidist.bench import pricing
from minidist.bench.allreduce_report import format_size, plot, targets, write_csv
from minidist.bench.pricing import RAW_MPI, predicted_time
from minidist.comm.collectives.allreduce import ALGORITHMS, allreduce
from minidist.comm.cost.mpich import LocalPrices, load_local_prices
from minidist.comm.cost.network import NetworkModel, load_network_model, network_model_path
from minidist.comm.ops import DTYPES
from minidist.comm.transport.communicator import Communicator
from minidist.util.arguments import image_file, integer, listing, one_of, output_file, size
from minidist.util.mpiexec import run_module_under_mpi
from minidist.util.pages import page_aligned_empty


def default_sizes(smallest: int = 8, largest: int = 64 << 20, factor: int = 4) -> list[int]:
    """``smallest, smallest·factor, ...`` up to ``largest``, which is always included."""
    sizes = [smallest]
    while sizes[-1] * factor < largest:
        sizes.append(sizes[-1] * factor)
    return sizes + [largest] if sizes[-1] != largest else sizes


def call_times(c: Communicator, algorithm: str, nbytes: int, dtype: np.dtype,
               iters: int, warmup: int) -> list[float]:
    """The slowest rank's time of each of ``iters`` calls, in seconds."""
    from mpi4py import MPI

    # both on a page, as OSU's benchmarks align theirs: where a buffer lies within a page
    # can change a copy's time several times over (util/pages.py)
    arr = page_aligned_empty(nbytes // dtype.itemsize, dtype)
    arr[...] = 1
    out = page_aligned_empty(arr.shape, dtype)
    if algorithm == RAW_MPI:
        def call() -> None:
            c.mpi_comm.Allreduce(arr, out, op=MPI.SUM)
    else:
        def call() -> None:
            allreduce(arr, c, "sum", algorithm, out=out)
    for _ in range(warmup):
        call()
    mine = []
    for _ in range(iters):
        # a fresh input, as each training step brings a new gradient: rewritten (untimed),
        # it sits modified in this core's cache, from where the other rank's copy is up
        # to 1.7x slower than from memory that was only read (see bench/fit.py)
        np.add(arr, 0, out=arr)
        c.barrier()
        start = time.perf_counter()
        call()
        mine.append(time.perf_counter() - start)
    slowest = np.empty(iters)
    c.mpi_comm.Allreduce(np.array(mine), slowest, op=MPI.MAX)
    return slowest.tolist()


def time_allreduce(c: Communicator, algorithm: str, nbytes: int, dtype: np.dtype,
                   iters: int, warmup: int) -> float:
    """Median over ``iters`` calls of the slowest rank's time, in seconds."""
    return float(statistics.median(call_times(c, algorithm, nbytes, dtype, iters, warmup)))


def run(c: Communicator, sizes: list[int], algorithms: list[str], dtype: np.dtype, iters: int,
        warmup: int, rounds: int, saved: tuple[NetworkModel, LocalPrices] | None = None,
        ) -> list[dict]:
    """Measure every (size, algorithm); rank 0 prints the table size by size.

    Each size in ``rounds`` rounds: a fit at that size (unless ``saved`` gives
    the model and MPI's prices), then ``iters / rounds`` calls of each
    algorithm; the row is the median of all its calls, priced by the median
    of the fits, so that timings and fit see the same minutes.
    """
    p, rows = c.size, []
    per_round = -(-iters // rounds)
    if c.rank == 0:
        how = f"fitted at each size, interleaved with the timings in {rounds} rounds" if (
            saved is None) else f"the saved fit (alpha {saved[0].alpha:.3g} s)"
        print(f"# allreduce, P = {p}, {dtype}, median of {per_round * rounds} calls, load "
              f"average {os.getloadavg()[0]:.1f}; model {how}")
        print("# model: every link independent; bus: the ranks share the host's memory bus")
        if os.environ.get("MPIR_CVAR_ENABLE_HEAVY_YIELD") == "1":
            print("# MPIR_CVAR_ENABLE_HEAVY_YIELD=1: a waiting rank gives its core away, so beside "
                  "other work every exchange waits for a core (alpha 200+ us, not 7): unset it")
        print(f"{'size':>10} {'algorithm':>19} {'time us':>10} {'algbw GB/s':>11} "
              f"{'busbw GB/s':>11} {'model us':>10} {'model/meas':>10} {'bus us':>10} "
              f"{'bus/meas':>9}")
    for nbytes in sizes:
        fits, times = [], {algorithm: [] for algorithm in algorithms}
        bus = pricing.bus_here(c, nbytes) if saved is None else ()
        for round_ in range(rounds):
            if saved is None:
                fits.append(pricing.fitted_here(c, nbytes, max(5, 25 // rounds)))
            for algorithm in algorithms:
                times[algorithm] += call_times(c, algorithm, nbytes, dtype, per_round,
                                               warmup if round_ == 0 else 1)
        network, local = pricing.median_fit(fits, bus) if saved is None else saved
        if c.rank == 0 and saved is None:
            print(pricing.describe_fit(nbytes, format_size(nbytes), fits, bus), flush=True)
        links = dataclasses.replace(network, host_curve=())
        for algorithm in algorithms:
            seconds = statistics.median(times[algorithm])
            model = predicted_time(algorithm, p, nbytes, dtype.itemsize, links, local)
            bus = predicted_time(algorithm, p, nbytes, dtype.itemsize, network, local)
            algbw = nbytes / seconds / 1e9
            row = {"world_size": p, "bytes": nbytes, "algorithm": algorithm, "time_s": seconds,
                   "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (p - 1) / p,
                   "model_s": model, "bus_model_s": bus}
            rows.append(row)
            if c.rank == 0:
                print(f"{format_size(nbytes):>10} {algorithm:>19} {seconds * 1e6:10.1f} "
                      f"{algbw:11.3f} {row['busbw_GBps']:11.3f} {model * 1e6:10.1f} "
                      f"{model / seconds:10.2f} {bus * 1e6:10.1f} {bus / seconds:9.2f}",
                      flush=True)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--ranks", type=integer(2), default=2,
                        help="ranks to launch under mpiexec when not already under MPI "
                             "(at least 2: the model is fitted on exchanges between ranks)")
    parser.add_argument("--sizes", type=listing(size), help="comma-separated sizes, e.g. "
                        "8,64K,64M (default: 8 B to 64 MiB by factors of --factor)")
    parser.add_argument("--factor", type=integer(2), default=4,
                        help="ratio between default sizes (default 4)")
    parser.add_argument("--max-size", type=size, default="64M",
                        help="largest default size (default 64M)")
    parser.add_argument("--algorithms", type=listing(one_of([*ALGORITHMS, RAW_MPI])),
                        default=[*ALGORITHMS, RAW_MPI],
                        help=f"comma-separated, from {[*ALGORITHMS, RAW_MPI]}")
    parser.add_argument("--dtype", choices=[np.dtype(d).name for d in DTYPES],
                        default="float32")
    parser.add_argument("--iters", type=integer(1), default=20,
                        help="timed calls of each algorithm at each size (default 20)")
    parser.add_argument("--warmup", type=integer(0), default=3,
                        help="untimed calls before them (default 3)")
    parser.add_argument("--rounds", type=integer(1), default=4,
                        help="per size: rounds of (fit, iters/rounds calls of each algorithm)")
    parser.add_argument("--csv", type=output_file, help="write the rows to this CSV file")
    parser.add_argument("--plot", type=image_file, help="save busbw vs size to this PNG")
    parser.add_argument("--fit", choices=["each", "saved"], default="each",
                        help="each: fit the model at each size in this run (default); "
                        "saved: use the fit saved by python -m minidist.bench.fit")
    args = parser.parse_args(argv)
    args.sizes = args.sizes or default_sizes(8, args.max_size, args.factor)
    itemsize = np.dtype(args.dtype).itemsize
    if uneven := [n for n in args.sizes if n % itemsize]:  # once found on every rank, running
        parser.error(f"--sizes {','.join(map(str, uneven))}: not a whole number of "
                     f"{args.dtype} values ({itemsize} B each)")
    if args.fit == "saved" and not network_model_path().exists():  # not the defaults, unsaid
        parser.error(f"--fit saved: no fit saved at {network_model_path()}; run python -m "
                     "minidist.bench.fit first")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    from minidist.comm.transport.world import exit_together, running_under_mpi, world

    if not running_under_mpi():
        return run_module_under_mpi("minidist.bench.allreduce", args.ranks, argv)
    c = world()
    if c.size < 2:  # one rank alone: the fit's exchanges would have no peer
        print(f"bench.allreduce: needs at least 2 ranks, mpiexec started {c.size}",
              file=sys.stderr)
        exit_together(2)
    sizes = args.sizes
    algorithms = args.algorithms
    dtype = np.dtype(args.dtype)
    saved = (load_network_model(host=True), load_local_prices()) if args.fit == "saved" else None
    wall, cpu = time.perf_counter(), time.process_time()
    rows = run(c, sizes, algorithms, dtype, args.iters, args.warmup, args.rounds, saved)
    if c.rank == 0:
        print("\n".join(targets(rows)))
        print(f"# run: {time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s "
              f"CPU on rank 0, load average {os.getloadavg()[0]:.1f} "
              f"at the end")
        if args.csv:
            write_csv(rows, args.csv)
        if args.plot:
            plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
