"""Shared-memory segments a stopped MPI job left behind.

MPICH maps one segment per host for the ranks of a job (``/dev/shm/mpich_shm_*``,
several MB) and removes it in ``MPI_Finalize``: never when a rank is killed or
the job aborts, which is how every failed or timed-out job ends. Each one then
holds its memory until the machine restarts. So whoever stops a job, once it is
stopped, calls :func:`remove_left_segments` with the time the job started: it
removes this user's segments made since then that no process maps any more.
A segment another job still uses is mapped by that job's ranks, and stays.
"""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

import psutil

SHM = Path("/dev/shm")
PREFIX = "mpich_shm_"


def mapped_segments() -> set[str]:
    """The paths under /dev/shm that a process of this user maps (its ``/proc/PID/maps``)."""
    me, found = os.getuid(), set()
    for process in psutil.process_iter(["uids"]):
        uids = process.info["uids"]
        if uids is None or uids.real != me:
            continue
        with suppress(OSError):
            with open(f"/proc/{process.pid}/maps") as maps:
                found.update(line.split(maxsplit=5)[5].strip() for line in maps
                             if f" {SHM}/" in line)
    return found


def remove_left_segments(since: float) -> list[Path]:
    """Remove this user's MPICH segments made at or after ``since`` (a ``time.time()``)
    that no process maps; returns them."""
    if not SHM.is_dir():  # not Linux: MPICH keeps its segments elsewhere, if at all
        return []
    me, candidates = os.getuid(), []
    for path in SHM.glob(f"{PREFIX}*"):
        with suppress(OSError):
            status = path.stat()
            if status.st_uid == me and status.st_ctime >= since:
                candidates.append(path)
    if not candidates:
        return []
    in_use = mapped_segments()
    left = [path for path in candidates if str(path) not in in_use]
    for path in left:
        path.unlink(missing_ok=True)
    return left
