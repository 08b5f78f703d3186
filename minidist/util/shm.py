"""Files a stopped MPI job left behind.

MPICH maps one segment per host for the ranks of a job (``/dev/shm/mpich_shm_*``,
several MB) and removes it in ``MPI_Finalize``; its launcher's proxy writes the
host's topology to ``/tmp/hydra_hwloc_xmlfile_*`` (a path it does not let one
change), holds it open for the job and removes it when it exits. Neither is
removed when a rank is killed or the job is stopped, which is how every failed
or timed-out job ends: each segment then holds its memory until the machine
restarts, and the topology files pile up. Open MPI's shared-memory transport
leaves its segments the same way (``/dev/shm/sm_segment.HOST.UID.JOB.RANK``,
16 MiB each). So whoever stops a job, once it is stopped, calls
:func:`remove_left_segments` with the time the job started: it removes this
user's such files made since then that no process maps or holds open.
Another job's are mapped or open in that job's processes, and stay.
"""

from __future__ import annotations

import os
import time
from contextlib import suppress
from pathlib import Path

import psutil

SHM = Path("/dev/shm")
PREFIX = "mpich_shm_"
TOPOLOGY_FILES = Path("/tmp"), "hydra_hwloc_xmlfile_"
OPEN_MPI_SEGMENTS = SHM, "sm_segment."
LEFT_BY_A_JOB = (SHM, PREFIX), TOPOLOGY_FILES, OPEN_MPI_SEGMENTS


def paths_in_use() -> set[str]:
    """The files a process of this user maps (its ``/proc/PID/maps``) or holds open."""
    me, found = os.getuid(), set()
    for process in psutil.process_iter(["uids"]):
        uids = process.info["uids"]
        if uids is None or uids.real != me:
            continue
        with suppress(OSError, psutil.Error):
            with open(f"/proc/{process.pid}/maps") as maps:
                found.update(line.split(maxsplit=5)[5].strip() for line in maps
                             if f" {SHM}/" in line)
            found.update(file.path for file in process.open_files())
    return found


def remove_left_segments(since: float, wait: float = 0.0) -> list[Path]:
    """Remove this user's MPICH segments and topology files made at or after ``since``
    (a ``time.time()``) that no process maps or holds open; returns them. ``wait``:
    seconds to look again while some are still in use (the ranks of a job that aborted
    may outlive its ``mpiexec`` by a moment, still mapping its segment)."""
    me, candidates = os.getuid(), []
    for folder, prefix in LEFT_BY_A_JOB:
        for path in folder.glob(f"{prefix}*") if folder.is_dir() else ():
            with suppress(OSError):
                status = path.stat()
                if status.st_uid == me and status.st_ctime >= since:
                    candidates.append(path)
    removed, until = [], time.monotonic() + wait
    while candidates:
        in_use = paths_in_use()
        for path in [path for path in candidates if str(path) not in in_use]:
            path.unlink(missing_ok=True)
            removed.append(path)
            candidates.remove(path)
        if not candidates or time.monotonic() >= until:
            break
        time.sleep(0.05)
    return removed
