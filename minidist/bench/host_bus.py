"""The host's memory bus, step 4 of the fit (``bench/fit.py``): k processes copying at once.

Ranks on one host copy through shared memory, and k of them at once share
one memory bus (``host_curve``, ``comm/cost/network.py``). The bus is timed
with processes forked here, as many as the cores, not with the fit's two
ranks; rank 0 measures while the others wait in a barrier that sleeps
(``quiet_barrier``, which ``bench/pricing.py`` uses too). Apart from
``fit.py``, whose other steps time MPI messages and local work on the ranks.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

from minidist.util.pages import page_aligned_empty


def _copies(nbytes: int, repeats: int, start, results) -> None:  # noqa: ANN001
    """One of k processes: copy ``nbytes`` ``repeats`` times from the common start."""
    source, target = page_aligned_empty(nbytes, np.uint8), page_aligned_empty(nbytes, np.uint8)
    source[...] = 1  # on pages of their own (util/pages.py), as the ranks' buffers are
    np.copyto(target, source)  # touch every page before the clock starts
    start.wait()
    began = time.perf_counter()
    for _ in range(repeats):
        np.copyto(target, source)
    results.put(time.perf_counter() - began)


def host_copy_bandwidth(nbytes: int, most: int, tries: int = 3) -> tuple[float, float]:
    """``(B_1, B_host)`` in bytes/s: k processes copy ``nbytes`` at once, k = 1..``most``;
    ``B_1`` is k = 1, ``B_host`` the most bytes all k copied per second (the slowest's time).

    Processes, not MPI ranks (the fit runs on 2, the bus serves every core), each
    copying about 256 MiB (at least 10 times) after a common start, so that they
    overlap; the best of ``tries`` for each k (a process descheduled by other work
    is not the bus).
    """
    context = multiprocessing.get_context("fork")
    repeats = max(10, (256 << 20) // nbytes)

    def rate(k: int) -> float:
        start, results = context.Barrier(k), context.Queue()
        workers = [context.Process(target=_copies, args=(nbytes, repeats, start, results))
                   for _ in range(k)]
        for worker in workers:
            worker.start()
        slowest = max(results.get() for _ in workers)
        for worker in workers:
            worker.join()
        return k * nbytes * repeats / slowest

    rates = [max(rate(k) for _ in range(tries)) for k in range(1, most + 1)]
    return rates[0], max(rates)


def host_curve(mpi_comm, sizes: list[int]) -> tuple:  # noqa: ANN001
    """``((nbytes, B_1, B_host), ...)`` on rank 0, k up to the cores it may use (the other
    ranks wait without spinning)."""
    most = len(os.sched_getaffinity(0))
    curve = tuple((n, *host_copy_bandwidth(n, most)) for n in sizes
                  ) if mpi_comm.Get_rank() == 0 else ()
    quiet_barrier(mpi_comm)
    return curve


def quiet_barrier(mpi_comm) -> None:  # noqa: ANN001
    """A barrier whose waiting ranks sleep instead of spinning on a core (which the ranks
    still measuring would otherwise share with them)."""
    waiting = mpi_comm.Ibarrier()
    while not waiting.Test():
        time.sleep(1e-3)
