"""A model of MPICH's own Allreduce: the benchmark's baseline, priced like our algorithms.

MPI's ``Allreduce`` runs out of the transport's sight, but MPICH's
algorithms are published, and at the sizes where bandwidth matters it runs
Rabenseifner's (``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=auto`` times the
same as ``reduce_scatter_allgather`` here from 64 KiB up). On
``P' = 2^floor(log2 P)`` ranks, for an N-byte vector:

1. copy the send buffer into the receive buffer (N bytes, a local copy);
2. reduce-scatter by recursive halving: in step k (k = 1..log2 P') a rank
   exchanges ``N/2^k`` bytes with a partner into a temporary buffer and
   reduces them with MPI's own reduction loop;
3. allgather by recursive doubling: the same exchanges, backwards, no
   reduction.

The ``P - P'`` extra ranks first hand their vector to a partner (one
message of N, one reduction) and get the result back at the end (one more
message). Short vectors go by recursive doubling instead (``log2 P'``
exchanges of N, each reduced); the model takes the cheaper of the two, as
MPICH's tuning does.

Three prices lie outside the α-β-γ model of the library's algorithms:

- MPICH's reduction loop (``MPI_Reduce_local``) is not numpy's ``np.add``,
  and slower for long vectors;
- the copy of step 1 (``comm.allreduce`` makes the same copy into ``out``
  before its in-place algorithms; the benchmark prices both alike);
- the temporary buffer, allocated at every call. From 32 MiB up (glibc's
  largest ``mmap`` threshold) it comes fresh from the kernel, and every
  page it receives into faults on first touch, a large share of a long
  Allreduce's time (README, Benchmarks). (The library keeps its buffers
  instead, ``Communicator.scratch``.)

``python -m minidist.bench.fit`` measures all three (``mpi_reduce_s`` and
``copy_s`` at every size, ``page_fault_s_per_byte``, in the saved fit);
without them the reduction and the copy are priced as ``np.add`` and a
fault as nothing.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass

from minidist.comm.cost.network import NetworkModel, network_model_path

FRESH_FROM = 32 << 20  # bytes: glibc's largest mmap threshold; longer buffers are fresh pages


@dataclass(frozen=True)
class LocalPrices:
    """Seconds per byte of MPI's reduction and of a local copy, by vector size."""

    reduce: tuple[tuple[int, float], ...] = ()  # (bytes, seconds per byte), sorted
    copy: tuple[tuple[int, float], ...] = ()
    page_fault: float = 0.0  # seconds per byte first touched in fresh memory

    def reduce_time(self, nbytes: float, at: int, net: NetworkModel) -> float:
        """MPI's reduction of ``nbytes``, priced at the collective's vector size ``at``."""
        return _per_byte(self.reduce, at, net.gamma_at(at)) * nbytes

    def copy_time(self, nbytes: float, at: int, net: NetworkModel) -> float:
        """A local copy of ``nbytes``, priced at the collective's vector size ``at``."""
        return _per_byte(self.copy, at, net.gamma_at(at)) * nbytes


def _per_byte(curve: tuple[tuple[int, float], ...], nbytes: int, default: float) -> float:
    """The measured point nearest at or above ``nbytes`` (the largest beyond the curve)."""
    if not curve:
        return default
    k = min(bisect_left(curve, (nbytes,)), len(curve) - 1)
    return curve[k][1]


def load_local_prices(path: str | None = None) -> LocalPrices:
    """The ``mpi_reduce_s`` and ``copy_s`` curves of the saved fit (empty when absent)."""
    found = network_model_path() if path is None else path
    try:
        with open(found) as file:
            return local_prices(json.load(file))
    except (OSError, ValueError):
        return LocalPrices()


def local_prices(fitted: dict) -> LocalPrices:
    """The prices in a fit's raw numbers (``bench.fit.fit``'s notes, or the saved JSON)."""

    def curve(key: str) -> tuple[tuple[int, float], ...]:
        return tuple(sorted((int(n), float(s) / int(n)) for n, s in fitted.get(key, {}).items()))

    return LocalPrices(curve("mpi_reduce_s"), curve("copy_s"),
                       float(fitted.get("page_fault_s_per_byte", 0.0)))


def mpich_time(p: int, nbytes: int, net: NetworkModel, local: LocalPrices | None = None) -> float:
    """Modelled seconds of MPICH's ``Allreduce`` on ``nbytes``: the cheaper of its two plans.

    Rabenseifner: ``copy(N) + sum_k [2 m(N/2^k) + r_MPI(N/2^k)]`` over
    ``k = 1..log2 P'`` (plus ``2 m(N) + r_MPI(N)`` for extra ranks), about
    ``copy(N) + 2 log2 P' alpha + 2 (P'-1)/P' N beta + (P'-1)/P' N gamma_MPI``;
    recursive doubling: ``copy(N) + log2 P' (m(N) + r_MPI(N))`` (same extra);
    from ``FRESH_FROM`` up, a page fault per page received into the temporary
    buffer. Every message and reduction is priced at the vector's size, as in
    ``cost/model.py``, and, with a ``host_curve``, as shared by the ranks of one host.
    """
    if p == 1 or nbytes == 0:
        return 0.0
    local = LocalPrices() if local is None else local
    steps = p.bit_length() - 1
    extra = p != 1 << steps
    # with a host_curve: P' ranks exchange and reduce at once, all P copy (NetworkModel.sharing)
    flat, slower = net.shared(1 << steps, nbytes), net.sharing(1 << steps, nbytes)

    def reduce(n: float) -> float:
        return local.reduce_time(n, nbytes, net) * slower

    fold = 2 * flat.message_time(nbytes) + reduce(nbytes) if extra else 0.0
    rabenseifner, share = 0.0, float(nbytes)
    for _ in range(steps):
        share /= 2
        rabenseifner += 2 * flat.message_time(share) + reduce(share)
    doubling = steps * (flat.message_time(nbytes) + reduce(nbytes))
    # the bytes received into the temporary buffer: N - N/P' halving (N doubling), N folding
    touched = (nbytes if extra else 0) + (nbytes - share if rabenseifner <= doubling else nbytes)
    faults = local.page_fault * touched * slower if nbytes >= FRESH_FROM else 0.0
    copy = local.copy_time(nbytes, nbytes, net) * net.sharing(p, nbytes)
    return copy + fold + min(rabenseifner, doubling) + faults
