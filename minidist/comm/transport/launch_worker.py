"""One rank of a ``launch(..., backend="mpi")`` job (run by mpiexec, not by users).

    mpiexec -n P python -m mpi4py -m minidist.comm.transport.launch_worker DIR

Reads the pickled ``(fn, args)`` from DIR, runs ``fn(world(), *args)`` and
writes ``result-RANK.pkl``: ``{"ok": True, "value": ...}`` or, if it
raised, ``{"ok": False, "summary", "traceback", "error", "time"}``. After an
error it aborts the MPI job so no other rank waits forever for this one.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import cloudpickle

from minidist.comm.transport.launch import PAYLOAD, SYS_PATH, result_path


def run_rank(folder: Path) -> None:
    """Run the shipped function on this rank and leave its result in ``folder``."""
    for entry in (folder / SYS_PATH).read_text().splitlines():
        if entry not in sys.path:
            sys.path.append(entry)
    from minidist.comm.transport.world import world

    comm = world()
    try:
        fn, args = cloudpickle.loads((folder / PAYLOAD).read_bytes())
        record = {"ok": True, "value": fn(comm, *args)}
        data = cloudpickle.dumps(record)
    except BaseException as err:  # sent to the parent, which re-raises it with our rank
        data = _error_record(err, traceback.format_exc())
    path = result_path(folder, comm.rank)
    path.with_suffix(".tmp").write_bytes(data)
    path.with_suffix(".tmp").rename(path)  # the parent never reads half a file
    if not cloudpickle.loads(data)["ok"]:
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)


def _error_record(err: BaseException, text: str) -> bytes:
    record = {"ok": False, "summary": f"{type(err).__name__}: {err}", "traceback": text,
              "error": err, "time": time.time()}
    try:
        return cloudpickle.dumps(record)
    except Exception:  # an exception that cannot be pickled still reports its text
        return cloudpickle.dumps({**record, "error": None})


if __name__ == "__main__":
    run_rank(Path(sys.argv[1]))
