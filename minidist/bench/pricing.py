"""The allreduce benchmark's model: a fit taken in the run, and the price of each row.

``bench/allreduce.py`` times each size in rounds; before each round's
timings :func:`fitted_here` fits the model at that size with ``bench.fit``'s
own measurements (the bus once per size, :func:`bus_here`), and
:func:`median_fit` takes each price's median over the rounds, so that the
model and the timings see the same minutes of a machine whose memory
bandwidth moves. :func:`predicted_time` prices what is timed.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable

from minidist.bench.fit import CURVE_FROM, HOST_SIZES, fit, host_curve, quiet_barrier
from minidist.comm import cost
from minidist.comm.cost.mpich import LocalPrices, local_prices, mpich_time
from minidist.comm.cost.network import NetworkModel
from minidist.comm.transport.communicator import Communicator

RAW_MPI = "MPI_Allreduce"  # the baseline: mpi4py's Allreduce called directly, no minidist


def predicted_time(algorithm: str, p: int, nbytes: int, itemsize: int,
                   network: NetworkModel, local: LocalPrices | None = None) -> float:
    """The model of what is timed: the algorithm plus the agreement check it runs, and
    for the library's algorithms the copy of ``arr`` into ``out`` that they reduce in place
    (``"mpi"`` passes ``MPI_IN_PLACE``: MPICH's own copy is that one)."""
    if algorithm == RAW_MPI:
        return mpich_time(p, nbytes, network, local)
    if algorithm == "mpi":
        return mpich_time(p, nbytes, network, local) + cost.check_cost(p, nbytes, network).time
    copy = (local or LocalPrices()).copy_time(nbytes, nbytes, network) * network.sharing(p, nbytes)
    return copy + cost.predict(algorithm, p, nbytes, itemsize, network, check=True).time


def fitted_here(c: Communicator, nbytes: int, repeats: int) -> tuple[NetworkModel, LocalPrices]:
    """The model fitted just now at ``nbytes`` (and 8 B, for MPI's latency; below
    ``CURVE_FROM``, at that size, as the saved fit prices them), every figure a median of
    ``repeats`` calls, without the bus (:func:`bus_here`). The model's prices are those of
    two ranks: with more, ranks 0 and 1 measure while the others wait, asleep. Every rank
    gets it."""
    from mpi4py import MPI

    pair = c.mpi_comm.Split(0 if c.rank < 2 else MPI.UNDEFINED, c.rank)
    fitted = None
    if pair != MPI.COMM_NULL:
        fitted = fit(pair, [max(nbytes, CURVE_FROM)], [], repeats)
        pair.Free()
    quiet_barrier(c.mpi_comm)
    if fitted is not None:
        fitted = fitted[0], local_prices(fitted[1])
    return c.mpi_comm.bcast(fitted, root=0)


def bus_here(c: Communicator, nbytes: int) -> tuple:
    """The host bus at ``nbytes`` (from 64 KiB up; else none), measured once before a
    size's rounds: its copiers are forked processes, and after a fork every page the
    ranks write faults once more (copy-on-write), which slowed the timings right after
    it up to 2.5x at 128-512 KiB. Every rank gets it."""
    return c.mpi_comm.bcast(host_curve(c.mpi_comm, [nbytes] if nbytes >= HOST_SIZES[0] else []),
                            root=0)


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(values))


def _median_points(curves: list[tuple]) -> tuple:
    """Point by point, the median of each column after the size (curves of equal sizes)."""
    return tuple((points[0][0], *(_median(point[j] for point in points)
                                  for j in range(1, len(points[0]))))
                 for points in zip(*curves, strict=True))


def median_fit(fits: list[tuple[NetworkModel, LocalPrices]], bus: tuple = (),
               ) -> tuple[NetworkModel, LocalPrices]:
    """Every price the median of the rounds' fits (all at the same size); ``bus`` the
    host curve."""
    nets, prices = [net for net, _ in fits], [local for _, local in fits]
    net = NetworkModel(_median(n.alpha for n in nets), _median(n.beta for n in nets),
                       _median(n.gamma for n in nets), _median_points([n.curve for n in nets]),
                       bus)
    return net, LocalPrices(_median_points([p.reduce for p in prices]),
                            _median_points([p.copy for p in prices]),
                            _median(p.page_fault for p in prices))


def describe_fit(nbytes: int, label: str, fits: list[tuple[NetworkModel, LocalPrices]],
                 bus: tuple = ()) -> str:
    """One line: the median fit at ``nbytes`` (``label``), the range over the rounds, the bus."""
    def rates(per_byte: list[float]) -> str:
        gbps = sorted(1e-9 / b if b else float("inf") for b in per_byte)
        return f"{statistics.median(gbps):.2f} GB/s ({gbps[0]:.2f}-{gbps[-1]:.2f})"

    nets = [net for net, _ in fits]
    alphas = sorted(n.alpha * 1e6 for n in nets)
    return (f"# fit at {label}, {len(fits)} rounds, median (range): alpha "
            f"{_median(alphas):.1f} us ({alphas[0]:.1f}-{alphas[-1]:.1f}), exchange "
            f"{rates([n.beta_at(nbytes) for n in nets])}, np.add "
            f"{rates([n.gamma_at(nbytes) for n in nets])}" + "".join(
                f", bus B_1 {alone / 1e9:.1f} GB/s, B_host {together / 1e9:.1f} GB/s, S "
                f"{together / alone:.2f}" for _, alone, together in bus)
            + f"; load average {os.getloadavg()[0]:.1f}")
