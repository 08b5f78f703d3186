"""The grader's nbgrader fork server: each run a process of its own, its status and log kept."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import psutil
import pytest

from minidist.course.isolation import SHARED_FOLDERS, remove_left_files, run_nbgrader_isolated
from minidist.course.nbgrader_fork import ForkServer
from minidist.course.release import nbgrader_env

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(
    shutil.which("alembic") is None and not (Path(os.sys.executable).parent / "alembic").exists(),
    reason="nbgrader is not installed")]


@pytest.fixture
def server():
    forks = ForkServer()
    yield forks
    forks.close()


def test_a_run_gives_nbgraders_status_and_output(server, tmp_path):
    status, log = run_nbgrader_isolated(server, ["--version"], tmp_path,
                                        nbgrader_env(tmp_path), timeout=60)
    assert status == 0 and "nbgrader version" in log, log
    status, log = run_nbgrader_isolated(server, ["autograde", "no_such_lab",
                                                 f"--CourseDirectory.root={tmp_path}"],
                                        tmp_path, nbgrader_env(tmp_path), timeout=60)
    assert status == 1 and "no_such_lab" in log, log
    status, log = run_nbgrader_isolated(server, ["--version"], tmp_path / "missing",
                                        nbgrader_env(tmp_path), timeout=60)
    assert status == 1 and "FileNotFoundError" in log, log  # the run's own error, logged


def test_runs_at_once_are_each_a_process_of_their_own(server, tmp_path):
    logs = [tmp_path / f"log{i}" for i in range(3)]
    for log in logs:
        log.touch()
    runs = [server.start(["--version"], tmp_path, nbgrader_env(tmp_path), log) for log in logs]
    for run in runs:
        run.join(60)
    assert [run.exitcode for run in runs] == [0, 0, 0]
    assert len({run.pid for run in runs}) == 3
    assert all("nbgrader version" in log.read_text() for log in logs)


def test_a_server_that_died_is_started_again_and_close_leaves_nothing(server, tmp_path):
    env = nbgrader_env(tmp_path)
    assert run_nbgrader_isolated(server, ["--version"], tmp_path, env, 60)[0] == 0
    first = psutil.Process(server._server.pid)
    first.kill()
    first.wait(10)
    assert run_nbgrader_isolated(server, ["--version"], tmp_path, env, 60)[0] == 0
    second = psutil.Process(server._server.pid)
    assert second.pid != first.pid
    server.close()
    assert not second.is_running() or second.status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_a_sandbox_users_left_files_are_removed_and_no_one_elses(tmp_path):
    """What a student's run leaves in /dev/shm (MPICH's segment when its MPI ranks are
    stopped) and in /tmp (hydra's topology file, a folder of the student's) goes with it;
    the same folders' other files stay."""
    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    theirs = [shm / "mpich_shm_abc_0", tmp / "hydra_hwloc_xmlfile_abc", tmp / "made" / "f"]
    mine = [shm / "psm_mine", tmp / "mine"]
    for path in theirs + mine:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x")
    for path in (theirs[0], theirs[1], theirs[2].parent, theirs[2]):
        os.chown(path, 61234, 61234)
    assert remove_left_files(61234, folders=(shm, tmp)) == 3
    assert not any(path.exists() for path in theirs) and not (tmp / "made").exists()
    assert all(path.exists() for path in mine)



SYSTEM_V_SEGMENT = """
import ctypes, sys
from minidist.course import sandbox
if sys.argv[1] == "sandboxed":
    sandbox.private_namespace()
libc = ctypes.CDLL(None, use_errno=True)
assert libc.shmget(0x5EED1, 4096, 0o1000 | 0o600) >= 0  # IPC_CREAT: left when this exits
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a namespace of its own needs root")
@pytest.mark.parametrize("kernel, left", [("sandboxed", False), ("plain", True)])
def test_system_v_shared_memory_goes_with_the_sandboxed_kernel(kernel, left):
    """Three 100 MB shmget segments of a graded notebook stayed on the machine, held for
    every later student: the kernel's namespace had no IPC namespace of its own."""
    import ctypes
    import subprocess
    import sys

    libc = ctypes.CDLL(None, use_errno=True)
    run = subprocess.run([sys.executable, "-c", SYSTEM_V_SEGMENT, kernel], timeout=60,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    segment = libc.shmget(0x5EED1, 0, 0)
    if segment >= 0:
        libc.shmctl(segment, 0, None)  # IPC_RMID: the plain run's, removed
    assert (segment >= 0) == left
    assert {"/var/tmp", "/run/lock"} <= {str(p) for p in SHARED_FOLDERS}
