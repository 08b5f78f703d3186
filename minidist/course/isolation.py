"""Isolation of one student's grading run: private folders, a user id, and clean-up.

For each student, ``grade`` builds a private course folder (mode 0700) that
holds a copy of the release gradebook and that student's notebook only, and
runs nbgrader there in its own process group with a wall-clock limit (a fork of a
process that imported nbgrader once: ``nbgrader_fork.py``). The
kernel, which is what runs student code, starts in ``sandbox.py``; when the
grader is root it runs as a user id of its own (``pick_uid``), so it cannot
open the private folder, the gradebook or anyone else's work, and after the
run every process still owned by that uid is killed (``kill_user``), however
it tried to escape (double fork, ``setsid``), and everything it left in
``/dev/shm``, ``/tmp`` and the other shared folders is removed
(``remove_left_files``; System V segments go with the kernel's IPC namespace,
``sandbox.py``: MPICH's segment of a
lab's MPI ranks, stopped mid-run, would otherwise hold its memory until the
machine restarts, and its launcher's topology file would stay in ``/tmp``, as
would anything the student's code put there). Without root, the nbgrader run's
process tree and process group are stopped instead
(:func:`minidist.util.processes.stop_process_tree`); a process that left both
with a double fork and ``setsid`` would survive, one more reason to grade as
root inside a container.

As root the kernel also has no network (``sandbox.py``). The checks
themselves are kept out of the kernel by ``trusted.py``, for the labs whose
checks can run that way (grading/README.md says what that guarantees).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

from minidist.course.nbgrader_fork import ForkServer
from minidist.util.processes import stop_process_tree

FIRST_SANDBOX_UID = 61000
SANDBOX_UIDS = 4000


def running_as_root() -> bool:
    return os.geteuid() == 0


def uid_processes(uid: int) -> list[int]:
    """Pids of the processes whose real uid is ``uid``."""
    return [p.pid for p in psutil.process_iter(["uids"])
            if p.info["uids"] is not None and p.info["uids"].real == uid]


def pick_uid(taken: set[int]) -> int:
    """A sandbox uid that owns no process now and is not handed out in this run."""
    start = FIRST_SANDBOX_UID + os.getpid() % SANDBOX_UIDS
    for step in range(SANDBOX_UIDS):
        uid = FIRST_SANDBOX_UID + (start + step) % SANDBOX_UIDS
        if uid not in taken and not uid_processes(uid):
            taken.add(uid)
            return uid
    raise RuntimeError("no free sandbox uid")


def kill_user(uid: int, attempts: int = 50) -> int:
    """SIGKILL every process of ``uid`` until none is left; returns how many were killed."""
    killed = 0
    for _ in range(attempts):
        pids = uid_processes(uid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed


# every place a user may write without owning it: what the kernel's user left there would
# fill the machine, or reach the next student (a note in /var/tmp read by another's notebook)
SHARED_FOLDERS = tuple(map(Path, ("/dev/shm", "/tmp", "/var/tmp", "/run/lock", "/dev/mqueue")))


def remove_left_files(uid: int, folders: tuple[Path, ...] = SHARED_FOLDERS) -> int:
    """Remove what ``uid`` owns at the top of ``folders``, once it owns no process; returns
    how many entries (a folder with all it holds counts once)."""
    removed = 0
    for path in (path for folder in folders if folder.is_dir() for path in folder.iterdir()):
        try:
            if path.lstat().st_uid != uid:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed += 1
        except OSError:  # gone meanwhile
            pass
    return removed


def make_workdir(uid: int | None) -> Path:
    """An empty folder, owned by the sandbox user, for the kernel's cwd, HOME and TMPDIR."""
    workdir = Path(tempfile.mkdtemp(prefix="minidist-sandbox-"))
    if uid is not None:
        os.chown(workdir, uid, uid)
    return workdir


def write_kernel_spec(jupyter_dir: Path) -> None:
    """Make ``python3`` (in this JUPYTER_PATH) start the kernel through ``sandbox.py``."""
    spec_dir = jupyter_dir / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "minidist.course.sandbox", "-f", "{connection_file}"],
            "display_name": "Python 3 (minidist sandbox)", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))


def sandbox_settings(workdir: Path, staging: Path, uid: int | None, hide: list[Path],
                     memory_mb: int, cpu_s: int, processes: int) -> str:
    """The MINIDIST_SANDBOX value that ``sandbox.py`` reads.

    ``expose`` lists what the kernel must read (the interpreter, the venv, the
    minidist package) even when it sits in a folder the sandbox user cannot enter.
    """
    import minidist

    expose = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}
    expose.add(str(Path(minidist.__file__).resolve().parent))
    return json.dumps({"workdir": str(workdir), "staging": str(staging), "uid": uid,
                       "hide": [str(p) for p in hide], "expose": sorted(expose),
                       "memory_mb": memory_mb, "cpu_s": cpu_s, "processes": processes})


def run_nbgrader_isolated(server: ForkServer, argv: list[str], cwd: Path,
                          env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """Run ``nbgrader ARGV`` in a process group of its own, forked by ``server``; stop all it
    started, at the end or on timeout. Returns (exit status, None on timeout; the log's
    last 20,000 characters)."""
    with tempfile.NamedTemporaryFile(mode="w+", prefix="minidist-nbgrader-") as log:
        process = server.start(argv, cwd, env, Path(log.name))
        process.join(timeout)
        returncode = process.exitcode
        stop_process_tree(process, grace=3.0)
        log.seek(0)
        return returncode, log.read()[-20000:]
