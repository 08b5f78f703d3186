"""``comm.world()``: the communicator of every process in this job.

Started by ``mpiexec``/``mpirun``, a process is one rank of an MPI job and
``world()`` wraps ``MPI.COMM_WORLD``. Started any other way (a notebook, a
plain ``python script.py``), it is a job of one: ``world()`` returns an
in-process communicator of size 1, and MPI is never initialised, so a
notebook kernel never loads MPI (a kernel that dies with MPI is a classic
course complaint).

How we know we run under MPI without initialising it: the launchers set
environment variables in each rank (MPICH/Hydra and Intel MPI:
``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALNRANKS``; PMIx-based launchers and
Open MPI: ``PMIX_RANK``, ``OMPI_COMM_WORLD_SIZE``), or the program has
already imported and initialised mpi4py itself (``python -m mpi4py``).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from minidist.comm.transport.communicator import Communicator

MPI_LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", "PMIX_RANK",
                          "OMPI_COMM_WORLD_SIZE")

_world: Communicator | None = None


def running_under_mpi() -> bool:
    """True when this process was started by an MPI launcher or MPI is initialised."""
    if any(name in os.environ for name in MPI_LAUNCHER_VARIABLES):
        return True
    mpi = sys.modules.get("mpi4py.MPI")
    return mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized()


def world() -> Communicator:
    """The MPI world under mpiexec, else a size-1 in-process communicator (same object
    on every call)."""
    global _world
    if _world is None:
        if running_under_mpi():
            from mpi4py import MPI

            from minidist.comm.transport.mpi import MPICommunicator

            _world = MPICommunicator(MPI.COMM_WORLD)
        else:
            from minidist.comm.transport.cluster import LocalCluster

            _world = LocalCluster(1).communicators()[0]
    return _world


def exit_together(status: int) -> NoReturn:
    """Exit with ``status`` on every rank, MPI finalized first if it runs (every rank of
    the job must call this: finalizing is collective). Under ``python -m mpi4py`` a
    non-zero exit otherwise becomes ``MPI_Abort``: one more line a rank, and MPICH's
    shared-memory segment left in /dev/shm until the machine restarts."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    raise SystemExit(status)
