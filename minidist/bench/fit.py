"""Fit the α-β-γ network model on this machine and save it for the in-process transport.

    python -m minidist.bench.fit              # launches 2 MPI ranks itself, saves the fit
    python -m minidist.bench.fit --dry-run    # print, do not save

1. alpha, beta: two MPI ranks time messages of 8 B to 64 MiB. A *ping-pong*
   (rank 0 sends, rank 1 sends it back; one way = half the round trip)
   gives alpha = the one-way time of 8 bytes. The allreduce algorithms,
   though, mostly *exchange* (both ranks send at once with Sendrecv); on
   one host both copies share the memory bus, so beta is the slope of the
   exchange time over the large sizes (>= 1 MiB), which is what a ring or
   recursive doubling step meets. The ping-pong slope is saved beside it.
2. gamma: seconds per byte of an in-place ``np.add`` on float32 arrays
   larger than the caches (what ``combine`` does).

The result goes where ``comm.load_network_model()`` looks
(``$MINIDIST_NETWORK`` or ``~/.cache/minidist/network.json``), with the raw
measurements, so ``LocalCluster`` and ``comm.cost`` price messages as this
machine does.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from minidist.comm.network import NetworkModel, network_model_path, save_network_model

SIZES = [8 << (2 * k) for k in range(12)] + [64 << 20]  # 8 B, 32 B, ..., 32 MiB, 64 MiB


def _one_way_times(mpi_comm, exchange: bool, repeats: int = 15) -> dict[int, float]:  # noqa: ANN001
    """Median one-way time per size: ping-pong (half a round trip) or a Sendrecv exchange."""
    rank, peer = mpi_comm.Get_rank(), 1 - mpi_comm.Get_rank()
    times = {}
    for nbytes in SIZES:
        send, recv = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
        inner = max(1, min(200, (1 << 22) // nbytes))  # batch tiny messages
        samples = []
        for _ in range(repeats + 2):
            mpi_comm.Barrier()
            start = time.perf_counter()
            for _ in range(inner):
                if exchange:
                    mpi_comm.Sendrecv(send, peer, 0, recv, peer, 0)
                elif rank == 0:
                    mpi_comm.Send(send, peer, 0)
                    mpi_comm.Recv(recv, peer, 0)
                else:
                    mpi_comm.Recv(recv, peer, 0)
                    mpi_comm.Send(send, peer, 0)
            elapsed = (time.perf_counter() - start) / inner
            samples.append(elapsed if exchange else elapsed / 2)
        times[nbytes] = float(np.median(samples[2:]))
    return times


def slope(times: dict[int, float], smallest: int = 1 << 20) -> float:
    """Least-squares seconds per byte over the sizes >= ``smallest``."""
    sizes = np.array([n for n in times if n >= smallest], float)
    seconds = np.array([times[int(n)] for n in sizes])
    return float(np.polyfit(sizes, seconds, 1)[0])


def measure_gamma(nbytes: int = 64 << 20, repeats: int = 9) -> float:
    """Seconds per byte of ``np.add(acc, incoming, out=acc)`` on float32, out of cache."""
    acc, incoming = np.ones(nbytes // 4, np.float32), np.ones(nbytes // 4, np.float32)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.add(acc, incoming, out=acc)
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)) / nbytes


def fit(mpi_comm) -> tuple[NetworkModel, dict] | None:  # noqa: ANN001
    """Run the measurements on 2 ranks; rank 0 gets the model and the raw numbers."""
    ping_pong = _one_way_times(mpi_comm, exchange=False)
    exchange = _one_way_times(mpi_comm, exchange=True)
    gamma = measure_gamma() if mpi_comm.Get_rank() == 0 else 0.0
    if mpi_comm.Get_rank() != 0:
        return None
    model = NetworkModel(alpha=ping_pong[8], beta=slope(exchange), gamma=gamma)
    notes = {"host": platform.node(), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
             "beta_ping_pong": slope(ping_pong),
             "ping_pong_one_way_s": {str(k): v for k, v in ping_pong.items()},
             "exchange_s": {str(k): v for k, v in exchange.items()}}
    return model, notes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description="Fit alpha, beta, gamma on this machine.")
    parser.add_argument("--out", help=f"where to save (default {network_model_path()})")
    parser.add_argument("--dry-run", action="store_true", help="print the fit, save nothing")
    args = parser.parse_args(argv)
    from minidist.comm.world import running_under_mpi

    if not running_under_mpi():
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        mpiexec = Path(sys.executable).parent / "mpiexec"
        return subprocess.call([str(mpiexec), "-n", "2", sys.executable, "-m", "mpi4py", "-m",
                                "minidist.bench.fit", *argv], env=env)
    from mpi4py import MPI

    if MPI.COMM_WORLD.Get_size() != 2:
        raise SystemExit("the fit needs exactly 2 ranks")
    result = fit(MPI.COMM_WORLD)
    if result is None:
        return 0
    model, notes = result
    print(f"alpha = {model.alpha:.3e} s (one-way 8 B)")
    print(f"beta  = {model.beta:.3e} s/B ({1e-9 / model.beta:.2f} GB/s exchanging; "
          f"ping-pong {1e-9 / notes['beta_ping_pong']:.2f} GB/s)")
    print(f"gamma = {model.gamma:.3e} s/B ({1e-9 / model.gamma:.2f} GB/s np.add)")
    if not args.dry_run:
        print(f"saved to {save_network_model(model, args.out, **notes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
