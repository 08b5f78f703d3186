"""One rank of a ``launch(..., backend="mpi")`` job (run by mpiexec, not by users).

    mpiexec -n P python -m mpi4py -m minidist.comm.transport.launch_worker DIR

Reads the pickled ``(fn, args)`` from DIR, runs ``fn(world(), *args)`` and
writes ``result-RANK.pkl``: ``{"ok": True, "value": ...}`` or, if it
raised, ``{"ok": False, "summary", "traceback", "error", "time"}``. After an
error it aborts the MPI job so no other rank waits forever for this one.
An error of MPI itself is most often a peer that died (a receive from a
process that is gone): the rank then waits :data:`PEER_DEATH_WAIT` seconds
before aborting, so that the dead peer's guard (``rank_guard.RANK_GUARD``) names
it first and ``launch`` reports that death, the cause, not this symptom.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import cloudpickle

from minidist.comm.transport.launch import PAYLOAD, SYS_PATH, result_path

PEER_DEATH_WAIT = 1.0  # seconds; mpiexec ends the job within a few hundredths after a death


def run_rank(folder: Path) -> None:
    """Run the shipped function on this rank and leave its result in ``folder``."""
    for entry in (folder / SYS_PATH).read_text().splitlines():
        if entry not in sys.path:
            sys.path.append(entry)
    from minidist.comm.transport.world import world

    comm = world()
    error = None
    try:
        fn, args = cloudpickle.loads((folder / PAYLOAD).read_bytes())
        record = {"ok": True, "value": fn(comm, *args)}
        data = cloudpickle.dumps(record)
    except BaseException as err:  # sent to the parent, which re-raises it with our rank
        error, data = err, _error_record(err, traceback.format_exc())
    path = result_path(folder, comm.rank)
    path.with_suffix(".tmp").write_bytes(data)
    path.with_suffix(".tmp").rename(path)  # the parent never reads half a file
    if error is not None:
        from mpi4py import MPI

        if isinstance(error, MPI.Exception):
            time.sleep(PEER_DEATH_WAIT)  # a dead peer's guard speaks first
        MPI.COMM_WORLD.Abort(1)


def _error_record(err: BaseException, text: str) -> bytes:
    record = {"ok": False, "summary": f"{type(err).__name__}: {err}", "traceback": text,
              "error": err, "time": time.time()}
    try:
        data = cloudpickle.dumps(record)
        cloudpickle.loads(data)  # a class whose __init__ wants other arguments fails here
        return data
    except Exception:  # an exception that cannot travel still reports its text and rank
        return cloudpickle.dumps({**record, "error": None})


if __name__ == "__main__":
    run_rank(Path(sys.argv[1]))
