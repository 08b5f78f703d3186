"""Running an example under mpiexec from a test: bounded in time, no process left behind."""

from __future__ import annotations

import subprocess
import time

from minidist.util.mpiexec import mpiexec_command, rank_environment
from minidist.util.processes import stop_process_tree
from minidist.util.shm import remove_left_segments


def run_under_mpiexec(ranks: int, module: str, args: list[str],
                      timeout: float = 120) -> subprocess.CompletedProcess:
    """``mpiexec -n ranks python -m mpi4py -m module *args``: its exit status, stdout, stderr.

    The job runs in its own session; on a timeout (or any error) its whole
    process tree is stopped, and TimeoutExpired propagates.
    """
    return run_mpi_command(mpiexec_command(ranks, ["-m", module, *args]), ranks, timeout)


def run_mpi_command(command: list[str], ranks: int,
                    timeout: float = 120) -> subprocess.CompletedProcess:
    """Run an mpiexec ``command`` line of ``ranks`` ranks as :func:`run_under_mpiexec` does."""
    started = time.time()
    job = subprocess.Popen(command, env=rank_environment(ranks), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = job.communicate(timeout=timeout)
    finally:
        stop_process_tree(job)
        remove_left_segments(started, wait=2.0)  # a killed rank leaves MPICH's; an aborted
        # one may outlive mpiexec by a moment, still mapping it
    return subprocess.CompletedProcess(command, job.returncode, out, err)
