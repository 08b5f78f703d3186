"""Where a buffer lies changes what a copy costs: a copy and an exchange by offset.

    python -m minidist.bench.placement              # launches 2 MPI ranks itself
    python -m minidist.bench.placement --sizes 64K,256K --offsets 0,16,32,2048

For each size, and for each offset d: a buffer pair whose destination starts
d bytes after its source, counted within a 4 KiB page (``(dst - src) mod
4096``), timed two ways:

1. ``copy``: ``np.copyto(dst, src)`` on rank 0 alone (glibc's ``memcpy``);
2. ``exchange``: both ranks ``Sendrecv`` at once, each sending from its
   ``src`` into the other's ``dst`` (above MPICH's single-copy threshold the
   kernel copies straight from one process into the other).

Each figure is the median of ``--iters`` calls (the exchange: the slower
rank's time, each call after a barrier, as ``bench/fit.py`` times), beside
its time over the same call's at the first offset given (0 by default); two
closing lines name the slowest of each kind against it. On a CPU whose
copies are slow for a destination just after its source (``util/pages.py``),
offsets 1 to 31 stand out; elsewhere every row reads about 1. This is why
the library's own buffers and the benchmarks' start on a page. Nothing here
is a target: it explains the cost model's rows (README, Benchmarks).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from minidist.bench.allreduce import format_size
from minidist.bench.fit import timed
from minidist.util.arguments import integer, listing, size
from minidist.util.mpiexec import run_module_under_mpi
from minidist.util.pages import PAGE, page_aligned_empty


def buffer_pair(nbytes: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """``(src, dst)`` of ``nbytes`` each, ``dst`` starting ``offset`` bytes past a page
    where ``src`` starts on one (and far enough away not to overlap)."""
    span = -(-nbytes // PAGE) * PAGE + PAGE
    block = page_aligned_empty(2 * span, np.uint8)
    src, dst = block[:nbytes], block[span + offset:span + offset + nbytes]
    src[...], dst[...] = 1, 0  # every page touched before the clock starts
    return src, dst


def copy_time(src: np.ndarray, dst: np.ndarray, iters: int) -> float:
    """Median seconds of ``np.copyto(dst, src)`` over ``iters`` calls, after one."""
    np.copyto(dst, src)
    times = []
    for _ in range(iters):
        began = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def exchange_call(mpi_comm, src: np.ndarray, dst: np.ndarray) -> Callable[[], None]:  # noqa: ANN001
    peer = 1 - mpi_comm.Get_rank()
    # communication: src to the peer's dst, the peer's src into dst, at once
    return lambda: mpi_comm.Sendrecv(src, peer, 0, dst, peer, 0)


def measure(mpi_comm, sizes: list[int], offsets: list[int], iters: int) -> list[dict]:  # noqa: ANN001
    """Rank 0 gets the rows (others an empty list); every rank takes part."""
    rows = []
    for nbytes in sizes:
        for offset in offsets:
            src, dst = buffer_pair(nbytes, offset)
            copy = copy_time(src, dst, iters) if mpi_comm.Get_rank() == 0 else 0.0
            mpi_comm.Barrier()
            exchange = timed(mpi_comm, exchange_call(mpi_comm, src, dst), iters)
            rows.append(dict(nbytes=nbytes, offset=offset, copy=copy, exchange=exchange))
    return rows if mpi_comm.Get_rank() == 0 else []


def report(rows: list[dict]) -> str:
    """The table, each time beside the same size's at the first offset, then the slowest
    row of each kind against it."""
    ref = rows[0]["offset"]
    lines = [f"{'size':>8} {'offset':>7} {'copy us':>9} {'GB/s':>6} {'vs ' + str(ref):>7}  "
             f"{'exchange us':>11} {'vs ' + str(ref):>7}"]
    first, worst = {}, {"copy": (1.0, None), "exchange": (1.0, None)}
    for row in rows:
        base = first.setdefault(row["nbytes"], row)
        ratios = {kind: row[kind] / base[kind] for kind in worst}
        for kind, ratio in ratios.items():
            worst[kind] = max(worst[kind], (ratio, row), key=lambda pair: pair[0])
        lines.append(f"{format_size(row['nbytes']):>8} {row['offset']:>7} "
                     f"{row['copy'] * 1e6:>9.1f} {row['nbytes'] / row['copy'] / 1e9:>6.1f} "
                     f"{ratios['copy']:>7.2f}  {row['exchange'] * 1e6:>11.1f} "
                     f"{ratios['exchange']:>7.2f}")
    for kind, (ratio, row) in worst.items():
        where = "" if row is None else f": offset {row['offset']}, {format_size(row['nbytes'])}"
        lines.append(f"slowest {kind} against offset {ref}: {ratio:.2f}x{where}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=listing(size), default="16K,64K,256K,1M")
    parser.add_argument("--offsets", type=listing(integer(0)), default="0,16,32,2048",
                        help="bytes from a page start; the first is the reference")
    parser.add_argument("--iters", type=integer(1), default=200)
    args = parser.parse_args(argv)
    offsets = args.offsets
    if any(o >= PAGE for o in offsets):
        parser.error(f"--offsets: each must be in 0..{PAGE - 1}")
    from minidist.comm.transport.world import running_under_mpi

    if not running_under_mpi():
        return run_module_under_mpi("minidist.bench.placement", 2, argv)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() != 2:
        raise SystemExit("the placement benchmark runs on exactly 2 ranks")
    rows = measure(MPI.COMM_WORLD, args.sizes, offsets, args.iters)
    if rows:
        print("# a copy and an exchange by where the destination starts within a page "
              f"(its offset from the source, mod {PAGE}); median of {args.iters} calls")
        print(report(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
