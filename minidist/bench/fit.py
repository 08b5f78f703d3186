"""Fit the network model on this machine, for the cost model and the in-process transport.

    python -m minidist.bench.fit              # launches 2 MPI ranks itself, saves the fit
    python -m minidist.bench.fit --dry-run    # print, do not save
    python -m minidist.bench.fit --max-size 4M  # stop at 4 MiB (a slow network)

1. alpha: the latency a message has *as the algorithms send it*: the time
   of the shortest complete allreduce, one exchange of 4 bytes through
   this library (``allreduce(..., "recursive_doubling", check=False)``).
   It is several times MPI's own latency (a ping-pong of 8 bytes, saved as
   ``alpha_mpi``): a Python collective pays its own bookkeeping per call
   and per step, and the model must price what runs, not what MPI could do.
2. beta(n): the allreduce algorithms mostly *exchange* (both ranks send at
   once with Sendrecv; on one host both copies share the memory bus), so
   at every size n from 256 B to 64 MiB (factors of 2) the ranks time a
   raw mpi4py exchange of a buffer they have just written (as an allreduce
   sends what the CPU just computed), and ``beta(n) = (time - alpha_mpi) /
   n``: the time the bytes themselves take. The textbook constant ``beta`` is the slope
   over the sizes >= 1 MiB; the ping-pong curve is saved beside it.
3. gamma(n): seconds per byte of an in-place ``np.add`` on float32 arrays
   of n bytes (what ``combine`` does), at the same sizes; the constant
   ``gamma`` is that of the largest size. Beside it, for the model of MPI's
   own Allreduce (``comm/cost/mpich.py``): MPI's reduction loop
   (``Reduce_local``) and a local copy, saved as ``mpi_reduce_s`` and
   ``copy_s``, and the price of first touching fresh memory
   (``page_fault_s_per_byte``).
4. the host's memory bus (``host_curve``, ``comm/cost/network.py``): from 64
   KiB to 64 MiB, k processes copy at once, k = 1 up to the cores; ``B_1`` is
   one alone, ``B_host`` the most all k copy together (``bench/host_bus.py``).

Buffers are reused between repetitions, as a training loop reuses its
arrays, so short ones are measured in cache (the point of the curve). The
result goes where ``comm.load_network_model()`` looks (``$MINIDIST_NETWORK``
or ``~/.cache/minidist/network.json``), with the raw measurements;
``python -m minidist.bench.allreduce`` runs :func:`fit` at each size it times.
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from minidist.bench.host_bus import (  # noqa: F401 (pricing.py's and the tests' import)
    host_copy_bandwidth,
    host_curve,
    quiet_barrier,
)
from minidist.comm.cost.mpich import FRESH_FROM
from minidist.comm.cost.network import NetworkModel, network_model_path, save_network_model
from minidist.util.arguments import output_file, size
from minidist.util.mpiexec import run_module_under_mpi
from minidist.util.pages import page_aligned_empty

SIZES = [8] + [256 << k for k in range(19)]  # 8 B, then 256 B, 512 B, ..., 64 MiB
CURVE_FROM = 256  # bytes: the curve starts here (below, alpha is all there is)
SLOPE_FROM = 1 << 20  # bytes: beta is the slope from here up
HOST_SIZES = [64 << 10 << 2 * k for k in range(6)]  # 64 KiB, 256 KiB, ..., 64 MiB


def timed(mpi_comm, call: Callable[[], None], repeats: int,  # noqa: ANN001
          prepare: Callable[[], None] | None = None) -> float:
    """Median over ``repeats`` calls of the slowest rank's time, each call after a barrier.

    Exactly how the benchmark times an allreduce, so that what the fit
    measures (waking up, skew between the ranks) is what the model predicts.
    ``prepare()`` runs before each call, untimed.
    """
    from mpi4py import MPI

    call()  # warm-up
    mine = np.empty(repeats)
    for k in range(repeats):
        if prepare is not None:
            prepare()
        mpi_comm.Barrier()
        start = time.perf_counter()
        call()
        mine[k] = time.perf_counter() - start
    slowest = np.empty_like(mine)
    mpi_comm.Allreduce(mine, slowest, op=MPI.MAX)
    return float(np.median(slowest))


def message_times(mpi_comm, exchange: bool, sizes: list[int] = SIZES,  # noqa: ANN001
                  repeats: int = 25) -> dict[int, float]:
    """Per size: one Sendrecv exchange, or one way of a ping-pong (half the round trip)."""
    rank, peer = mpi_comm.Get_rank(), 1 - mpi_comm.Get_rank()
    times = {}
    for nbytes in sizes:
        send, recv = page_aligned_empty(nbytes, np.uint8), page_aligned_empty(nbytes, np.uint8)
        send[...] = 1
        if exchange:
            def call(send: np.ndarray = send, recv: np.ndarray = recv) -> None:
                mpi_comm.Sendrecv(send, peer, 0, recv, peer, 0)
        else:
            def call(send: np.ndarray = send, recv: np.ndarray = recv) -> None:
                for turn in (0, 1):
                    if rank == turn:
                        mpi_comm.Send(send, peer, 0)
                    else:
                        mpi_comm.Recv(recv, peer, 0)
        # an allreduce sends what the CPU has just written (the caller's vector, the
        # partial sum it just added); those bytes sit modified in the sender's own
        # cache, and the copy to the other rank is slower than from clean memory
        # (1.7x for 256 KiB-1 MiB here), so each send buffer is rewritten first
        times[nbytes] = timed(mpi_comm, call, repeats, partial(np.add, send, 1, out=send)) / (
            1 if exchange else 2)
    return times


def slope(times: dict[int, float], smallest: int = SLOPE_FROM) -> float:
    """Least-squares seconds per byte over the sizes >= ``smallest``."""
    sizes = np.array([n for n in times if n >= smallest], float)
    seconds = np.array([times[int(n)] for n in sizes])
    return float(np.polyfit(sizes, seconds, 1)[0])


def local_times(mpi_comm, sizes: list[int] = SIZES,  # noqa: ANN001
                repeats: int = 25) -> dict[str, dict[int, float]]:
    """Per size in bytes, on float32, on both ranks at once: the local work of a collective.

    ``add``: ``np.add(acc, incoming, out=acc)``, what ``combine`` does (γ);
    ``mpi_reduce``: ``MPI.SUM.Reduce_local(incoming, acc)``, MPI's own reduction loop;
    ``copy``: ``np.copyto`` of a just-written vector (MPICH's Allreduce starts by
    copying its input into the output). The last two price MPI's Allreduce
    (``comm/cost/mpich.py``).
    """
    from mpi4py import MPI

    times: dict[str, dict[int, float]] = {"add": {}, "mpi_reduce": {}, "copy": {}}
    for nbytes in (n for n in sizes if n >= CURVE_FROM):
        acc, incoming = (page_aligned_empty(nbytes // 4, np.float32) for _ in range(2))
        acc[...], incoming[...] = 1, 1
        times["add"][nbytes] = timed(mpi_comm, partial(np.add, acc, incoming, out=acc), repeats)
        times["mpi_reduce"][nbytes] = timed(mpi_comm, partial(MPI.SUM.Reduce_local, incoming,
                                                              acc), repeats)
        times["copy"][nbytes] = timed(mpi_comm, partial(np.copyto, acc, incoming), repeats,
                                      partial(np.add, incoming, 1, out=incoming))
    return times


def page_fault_cost(mpi_comm, nbytes: int = 64 << 20, repeats: int = 10) -> float:  # noqa: ANN001
    """Seconds per byte of first touching fresh memory, beyond writing it.

    A buffer this long comes straight from the kernel (``mmap``) at every
    ``malloc``, and each 4 KiB page faults when first written: MPICH's
    Allreduce pays this on its temporary buffer from 32 MiB up
    (``comm/cost/mpich.py``). Measured on a private anonymous ``mmap``, as
    malloc gets it: not Python's default shared one, whose pages are the
    kernel's shared memory and fault about 1.4x slower here; nor numpy's own
    large arrays, which ask for huge pages and fault 512x less often (4 ms
    instead of 24 ms for 64 MiB here).
    """
    kept = np.empty(nbytes, np.uint8)

    def fill_fresh() -> None:
        with mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as fresh:
            np.frombuffer(fresh, np.uint8).fill(1)

    warm = timed(mpi_comm, partial(kept.fill, 1), repeats)
    return max(0.0, timed(mpi_comm, fill_fresh, repeats) - warm) / nbytes


def library_latency(mpi_comm, repeats: int = 100) -> float:  # noqa: ANN001
    """Seconds of one exchange of 4 bytes through ``comm.allreduce`` (no check)."""
    from minidist.comm.collectives.allreduce import allreduce
    from minidist.comm.transport.mpi import MPICommunicator

    c = MPICommunicator(mpi_comm)
    one, out = np.ones(1, np.float32), np.empty(1, np.float32)
    # the least of three medians: one rank descheduled for a while must not set the price
    # of every message (a 2-core machine running other work showed 50 µs once, 6 µs after)
    latency = min(timed(mpi_comm, lambda: allreduce(one, c, "sum", "recursive_doubling",
                                                    out=out, check=False), repeats)
                  for _ in range(3))
    c.private().mpi_comm.Free()  # the duplicate the allreduce made: a fit runs at every size
    return latency


def fit(mpi_comm, sizes: list[int] = SIZES, host_sizes: list[int] | None = None,  # noqa: ANN001
        repeats: int = 25) -> tuple[NetworkModel, dict] | None:
    """Run the measurements on 2 ranks at ``sizes`` (8 B and any of :data:`SIZES`, or
    one size for a flat model of it; the bus at ``host_sizes``, default those of
    :data:`HOST_SIZES` within ``sizes``), each the median of ``repeats`` calls; rank 0
    gets the model and the raw numbers. Page faults are measured only from ``FRESH_FROM``."""
    sizes = sorted({8, *sizes})
    host_sizes = [n for n in HOST_SIZES if n in sizes] if host_sizes is None else host_sizes
    ping_pong = message_times(mpi_comm, exchange=False, sizes=sizes, repeats=repeats)
    exchange = message_times(mpi_comm, exchange=True, sizes=sizes, repeats=repeats)
    local = local_times(mpi_comm, sizes, repeats)
    adding = local["add"]
    fault = page_fault_cost(mpi_comm) if max(sizes) >= FRESH_FROM else 0.0
    alpha = library_latency(mpi_comm, 4 * repeats)
    bus = host_curve(mpi_comm, host_sizes)
    if mpi_comm.Get_rank() != 0:
        return None
    alpha_mpi = ping_pong[8]
    curve = tuple((n, max(0.0, exchange[n] - alpha_mpi) / n, adding[n] / n)
                  for n in sizes if n >= CURVE_FROM)
    largest = max(adding)
    long = sum(n >= SLOPE_FROM for n in sizes) >= 2  # else beta is the largest size's
    model = NetworkModel(alpha=alpha, beta=slope(exchange) if long else curve[-1][1],
                         gamma=adding[largest] / largest, curve=curve, host_curve=bus)
    notes = {"host": platform.node(), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
             "load_average": os.getloadavg()[0], "alpha_mpi": alpha_mpi,
             "beta_ping_pong": slope(ping_pong) if long else ping_pong[largest] / largest,
             "ping_pong_one_way_s": {str(k): v for k, v in ping_pong.items()},
             "exchange_s": {str(k): v for k, v in exchange.items()},
             "page_fault_s_per_byte": fault,
             **{f"{name}_s": {str(k): v for k, v in measured.items()}
                for name, measured in local.items()}}
    return model, notes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description="Fit alpha, beta, gamma on this machine.")
    parser.add_argument("--out", type=output_file,
                        help=f"where to save (default {network_model_path()})")
    parser.add_argument("--dry-run", action="store_true", help="print the fit, save nothing")
    parser.add_argument("--max-size", type=size, default="64M",
                        help="the largest message (default 64M; "
                        "at least 2M: beta is the slope from 1 MiB up)")
    args = parser.parse_args(argv)
    sizes = [n for n in SIZES if n <= args.max_size]
    if sum(n >= SLOPE_FROM for n in sizes) < 2:
        parser.error(f"--max-size {args.max_size}: at least 2M (beta is the slope from 1 MiB up)")
    from minidist.comm.transport.world import running_under_mpi

    if not running_under_mpi():
        return run_module_under_mpi("minidist.bench.fit", 2, argv)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() != 2:
        raise SystemExit("the fit needs exactly 2 ranks")
    result = fit(MPI.COMM_WORLD, sizes)
    if result is None:
        return 0
    model, notes = result
    print(f"alpha = {model.alpha:.3e} s (an exchange through minidist; MPI's own one-way "
          f"8 B: {notes['alpha_mpi']:.3e} s); load average {notes['load_average']:.1f}")
    print(f"beta  = {model.beta:.3e} s/B ({1e-9 / model.beta:.2f} GB/s exchanging >= 1 MiB; "
          f"ping-pong {1e-9 / notes['beta_ping_pong']:.2f} GB/s)")
    print(f"gamma = {model.gamma:.3e} s/B ({1e-9 / model.gamma:.2f} GB/s np.add, largest size)")
    print(f"{'bytes':>10} {'exchange GB/s':>14} {'np.add GB/s':>12}")
    for nbytes, beta, gamma in model.curve:
        print(f"{nbytes:>10} {1e-9 / beta if beta else float('inf'):14.2f} "
              f"{1e-9 / gamma:12.2f}")
    # the bus model's own check: a one-way message (one rank copying) against an exchange
    # (two at once) is sharing(1); the ping-pong against the exchange measures it
    print(f"host bus ({len(os.sched_getaffinity(0))} cores): bytes, B_1 and B_host GB/s, S, "
          "one-way/exchange bytes time modelled and measured")
    for nbytes, alone, together in model.host_curve:
        one_way, both = (notes[key][str(nbytes)] - notes["alpha_mpi"] for key in
                         ("ping_pong_one_way_s", "exchange_s"))
        print(f"{nbytes:>10} {alone / 1e9:9.2f} {together / 1e9:9.2f} {together / alone:6.2f} "
              f"{model.sharing(1, nbytes):6.2f} {one_way / both:6.2f}")
    if not args.dry_run:
        print(f"saved to {save_network_model(model, args.out, **notes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
