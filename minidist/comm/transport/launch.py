"""``launch``: run one function on P ranks and get P results back.

    md.launch(fn, world_size=4, args=(x,), backend="local")   # threads, modelled time
    md.launch(fn, world_size=4, args=(x,), backend="mpi")     # real processes under mpiexec

Either way every rank calls ``fn(comm, *args)`` and ``launch`` returns the
list of return values in rank order. A rank that raises makes ``launch``
raise :class:`~minidist.comm.errors.RankError`, naming the rank and
carrying its traceback; no run outlives ``timeout`` seconds.

How the "mpi" backend ships a function to other processes:

1. ``fn`` and ``args`` are pickled *by value* with cloudpickle: the code
   itself travels, not an import path, so a function written in a
   notebook cell, a script or a test file works (its module is registered
   with ``cloudpickle.register_pickle_by_value`` while pickling). Its code
   keeps the name of its file (cloudpickle would write ``<dynamic-code>``),
   so a rank's traceback names the real file and line (:class:`_KeepingFiles`),
   and shows the line even of a notebook's cell (its lines travel with it).
2. They are written to a fresh temporary directory, with the parent's
   ``sys.path`` (on a cluster pass ``workdir=`` on a shared filesystem).
3. ``mpiexec -n P python -m mpi4py -m minidist.comm.transport.launch_worker DIR``
   runs, as :mod:`minidist.util.mpiexec` starts every MPI job: the
   ``mpiexec`` of this environment, ``-m mpi4py`` (an uncaught exception on
   one rank aborts the whole job instead of leaving the others blocked), one
   thread per rank, and MPICH yielding its core when ranks outnumber cores;
   each rank under :mod:`~minidist.comm.transport.mpirun`'s guard, so that a
   rank killed by a signal ends the job at once and is named (:class:`RankKilled`).
4. Each rank writes ``result-RANK.pkl``: its value, or its exception and
   traceback. Ranks' stdout and stderr are relayed to this process's
   ``sys.stdout``/``sys.stderr`` as they come (so they show in a notebook,
   progress bars included), not line by line: mpiexec (hydra) has already
   merged all ranks into one stream, each piece as a rank wrote it, and no
   longer says whose a piece is. A line written in pieces can be cut by
   another rank's output: ``print(..., end="")`` then more, or Python's own
   8 KiB blocks when stdout is a pipe; ``print(..., flush=True)`` writes a
   line in one piece.
5. Whatever happens (an end, a rank's death, a timeout, the caller
   interrupted), ``mpiexec``, started in a session of its own, is stopped
   with everything it started (:func:`minidist.util.processes.stop_process_tree`:
   SIGTERM, then SIGKILL): nothing is left running
   (:func:`~minidist.comm.transport.mpirun.run_job`).

Options of the "mpi" backend: ``hostfile=`` (a file of host names, passed
as MPICH's ``-f`` or Open MPI's ``--hostfile``), ``mpiexec_args=[...]`` (given
to mpiexec verbatim, before ``-n``: ``util.mpiexec.env_args("NAME", "value")``),
``workdir=`` (where the temporary directory is made). Across hosts, every
host needs this Python environment at the same path and ``workdir`` on a
filesystem they all see. Options of the "local" backend are those of
:class:`~minidist.comm.transport.cluster.LocalCluster` (``network``,
``stragglers``, ``failures``, ``eager_limit``, ``trace``).
"""

from __future__ import annotations

import io
import linecache
import marshal
import os
import sys
import sysconfig
import tempfile
import types
from collections import ChainMap
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle

from minidist.comm.errors import RankError, RankKilled
from minidist.comm.transport.cluster import run_local
from minidist.comm.transport.mpirun import JobEnd, guarded_command, run_job
from minidist.util.mpiexec import rank_environment
from minidist.util.values import whole

PAYLOAD = "payload.pkl"  # the files of a job's temporary directory
SYS_PATH = "sys_path.txt"


def result_path(folder: Path, rank: int) -> Path:
    """Where rank ``rank`` of a job leaves its result."""
    return folder / f"result-{rank}.pkl"


def launch(fn: Callable[..., Any], world_size: int = 4, args: tuple = (),
           backend: str = "local", timeout: float | None = 60.0, **options: Any) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``world_size`` ranks; returns their results by rank."""
    world_size = whole("world_size", world_size, least=1)
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, or None for no limit; got {timeout!r}")
    if backend == "local":
        return run_local(fn, world_size, args, timeout=timeout, **options)
    if backend == "mpi":
        return run_mpi(fn, world_size, args, timeout=timeout, **options)
    raise ValueError(f"unknown backend {backend!r}; use 'local' or 'mpi'")


def run_mpi(fn: Callable[..., Any], world_size: int, args: tuple = (),
            timeout: float | None = 60.0, hostfile: str | os.PathLike | None = None,
            mpiexec_args: Sequence[str] = (), workdir: str | os.PathLike | None = None
            ) -> list[Any]:
    """The "mpi" backend of :func:`launch` (steps in the module docstring)."""
    # 3. the job's command, first: a missing mpiexec is named before anything is written
    command = guarded_command(world_size, ["-m", "minidist.comm.transport.launch_worker"],
                              hostfile, mpiexec_args)
    # a rank's process may still be writing as the folder goes (the job's tree is stopped,
    # but an exiting process can outlive that by a moment): its removal must not fail the run
    with tempfile.TemporaryDirectory(prefix="minidist-launch-", dir=workdir,
                                     ignore_cleanup_errors=True) as tmp:
        folder = Path(tmp)
        # 1-2. the function, its arguments and where to import from
        (folder / PAYLOAD).write_bytes(_pickle_by_value(fn, args))
        (folder / SYS_PATH).write_text("\n".join(p for p in sys.path if p))
        # 3. the job, started with the ranks' environment
        end = run_job([*command, str(folder)], rank_environment(world_size), timeout)
        if end.timed_out:
            raise TimeoutError(f"launch: the MPI job did not finish within {timeout} s; "
                               "it was stopped (SIGTERM, then SIGKILL)")
        # 4. the results
        return _collect(folder, world_size, end)


def _collect(folder: Path, world_size: int, end: JobEnd) -> list[Any]:
    """Each rank's value; else the rank killed first, or the first rank error re-raised
    with its rank and traceback."""
    if end.deaths:  # a rank killed leaves no result, and the others were stopped
        raise RankKilled(end.deaths[0].rank, str(end.deaths[0]))
    records = {}
    for rank in range(world_size):
        path = result_path(folder, rank)
        if path.exists():
            records[rank] = cloudpickle.loads(path.read_bytes())
    failed = {rank: rec for rank, rec in records.items() if not rec["ok"]}
    if failed:
        rank, record = min(failed.items(), key=lambda item: item[1]["time"])
        raise RankError(rank, record["summary"], record["traceback"]) from record["error"]
    if len(records) < world_size:
        missing = sorted(set(range(world_size)) - set(records))
        said = "".join(end.stderr_tail) or "(nothing on stderr)\n"
        raise RuntimeError(f"launch: ranks {missing} ended without a result, neither returning "
                           f"nor raising (mpiexec's exit status {end.returncode}); its last "
                           f"words on stderr:\n{said}")
    return [records[rank]["value"] for rank in range(world_size)]


def _pickle_by_value(fn: Callable[..., Any], args: tuple) -> bytes:
    """cloudpickle ``(fn, args)``, shipping the code of the caller's own modules."""
    modules = [m for m in {_module_of(fn), *map(_module_of, args)} if _is_user_code(m)]
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        buffer = io.BytesIO()
        _KeepingFiles(buffer).dump((fn, args))
        return buffer.getvalue()
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


def _module_of(obj: object) -> ModuleType | None:
    name = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
    return sys.modules.get(name) if name else None


def _is_user_code(module: ModuleType | None) -> bool:
    """A module of the caller's (script, notebook, test file), not of an installed package."""
    if module is None or module.__name__ in ("__main__", "builtins"):
        return False  # __main__ already goes by value; builtins cannot
    if module.__name__.partition(".")[0] == "minidist":
        return False
    where = getattr(module, "__file__", None)
    if where is None:
        return False
    installed = {sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")}
    return not any(Path(where).resolve().is_relative_to(Path(p).resolve()) for p in installed)


def _marshalled(code: types.CodeType) -> tuple:
    """``code`` as marshal writes it, with its file's lines where a rank could not read
    them (a notebook cell's "file": IPython keeps its lines in ``linecache`` only)."""
    lines = [] if os.path.exists(code.co_filename) else linecache.getlines(code.co_filename)
    return _unmarshalled, (marshal.dumps(code), lines)


def _unmarshalled(data: bytes, lines: list[str]) -> types.CodeType:
    """On a rank: the code back, and its file's shipped lines where tracebacks look."""
    code = marshal.loads(data)
    if lines:
        linecache.cache.setdefault(code.co_filename,
                                   (sum(map(len, lines)), None, lines, code.co_filename))
    return code


class _KeepingFiles(cloudpickle.Pickler):
    """cloudpickle, but code objects travel as ``marshal`` writes them (as a ``.pyc`` holds
    them): whole, their file name included. cloudpickle 3.1 replaces it with
    ``<dynamic-code>``, and a rank's traceback could then name no file and show no line.
    The ranks run this same Python (one environment), so they read it back as it was."""

    dispatch_table = ChainMap({types.CodeType: _marshalled}, cloudpickle.Pickler.dispatch_table)
