"""A rank killed with SIGKILL under mpiexec: the job ends within the stated bound, one line
names the rank, no process is left; a data-parallel run killed and started again ends with
the parameters of a run never interrupted.

Each job runs under ``minidist mpirun`` (``minidist.comm.transport.mpirun``), in a
session of its own; a watcher notes every process it starts, so that the test can
check that none outlives it, and the job's tree is stopped whatever happens. Each test
prints its kill-to-end time (``pytest -s``); README's "When a rank dies" quotes them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from minidist import comm
from minidist.comm.transport.mpirun import DEATH_GRACE, run_job
from minidist.comm.transport.mpirun import main as mpirun_main
from minidist.parallel.checkpoint import latest_checkpoint
from minidist.util.mpiexec import rank_environment
from minidist.util.processes import KILL_GRACE, stop_process_tree

MPIEXEC = Path(sys.executable).parent / "mpiexec"
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]
BOUND = DEATH_GRACE + KILL_GRACE  # seconds from a rank's death to the job's end, at most


class Watcher:
    """Every process started under ``root`` (a pid) from now on, noted every 20 ms."""

    def __init__(self, root: int):
        self.root, self.seen = psutil.Process(root), {}
        self.before = {p.pid for p in self.root.children(recursive=True)}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.done.wait(0.02):
            try:
                for process in self.root.children(recursive=True):
                    if process.pid not in self.before:
                        self.seen.setdefault(process.pid, process)
            except psutil.Error:
                return

    def rank(self, rank: int, timeout: float = 30) -> psutil.Process:
        """The python process of MPI rank ``rank`` (its guard has the same rank variable:
        MPICH's PMI_RANK, Open MPI's OMPI_COMM_WORLD_RANK)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in list(self.seen.values()):
                try:
                    if (process.name().startswith("python")
                            and str(rank) in (process.environ().get("PMI_RANK"),
                                              process.environ().get("OMPI_COMM_WORLD_RANK"))):
                        return process
                except psutil.Error:
                    continue
            time.sleep(0.02)
        raise AssertionError(f"no process of rank {rank} within {timeout} s")

    def survivors(self) -> list[psutil.Process]:
        """What is still there (zombies too: someone has yet to reap them)."""
        self.done.set()
        self.thread.join()
        return [p for p in self.seen.values() if p.is_running()]


class Job:
    """``minidist mpirun -n RANKS PROGRAM...``, its output collected as it comes."""

    def __init__(self, ranks: int, program: list[str]):
        command = [sys.executable, "-m", "minidist.cli", "mpirun", "-n", str(ranks), *program]
        self.process = subprocess.Popen(command, env=rank_environment(ranks),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        start_new_session=True)
        self.watcher = Watcher(self.process.pid)
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(pipe, into), daemon=True)
                        for pipe, into in ((self.process.stdout, self.out),
                                           (self.process.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(pipe, into):
        for chunk in iter(lambda: pipe.read1(1 << 16), b""):
            into.append(chunk.decode(errors="replace"))

    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)

    def wait_for(self, ready, what: str, timeout: float = 60) -> None:
        """Until ``ready()`` holds; the job must still be running then."""
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.process.poll() is None, f"the job ended before {what}:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n{self.text()}"
            time.sleep(0.02)

    def kill_rank(self, rank: int) -> tuple[int, float]:
        """SIGKILL rank ``rank``'s process; its pid and the seconds until the job ended."""
        pid = self.watcher.rank(rank).pid
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=BOUND + 30)
        return pid, time.monotonic() - killed

    def finish(self, timeout: float = 120) -> str:
        self.process.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(5)
        assert self.process.returncode == 0, self.text()
        return self.text()


@pytest.fixture
def jobs():
    """Start jobs; whatever happens, each one's process tree is stopped at the end."""
    started = []
    yield lambda ranks, program: started.append(Job(ranks, program)) or started[-1]
    stop_process_tree(*(job.process for job in started))


def assert_ended_cleanly(job: Job, rank: int, pid: int, seconds: float, case: str) -> None:
    for reader in job.readers:
        reader.join(5)
    text = job.text()
    print(f"\n{case}: rank {rank} killed, the job ended {seconds:.3f} s later")
    assert seconds < BOUND, f"the job ended {seconds:.1f} s after the kill:\n{text}"
    assert job.process.returncode == 128 + signal.SIGKILL, text
    assert re.search(rf"minidist: rank {rank} \(pid {pid} on \S+\) was killed by signal 9\n",
                     text), text
    assert re.search(rf"mpirun: rank {rank} \(pid {pid} on \S+\) was killed by SIGKILL;", text)
    assert job.watcher.survivors() == []


@pytest.mark.timeout(90)
def test_a_rank_killed_in_an_allreduce_ends_the_job(jobs):
    job = jobs(3, [str(Path(__file__).parent / "mpi_allreduce_loop.py")])
    job.wait_for(lambda: "allreducing" in "".join(job.out), "first allreduce")
    pid, seconds = job.kill_rank(1)
    assert_ended_cleanly(job, 1, pid, seconds, "allreduce")


@pytest.mark.timeout(90)
def test_a_parameter_server_killed_ends_the_job(jobs):
    job = jobs(3, ["-m", "minidist.examples.ps_mlp", "--consistency", "bsp",
                   "--steps", "100000", "--eval-every", "100000"])
    # the servers are serving: worker 0's progress bar has counted some clocks (MPICH
    # forwards it at once, Open MPI only at a newline), or the server has computed for
    # seconds of CPU, more than starting Python, numpy and MPI takes
    server = job.watcher.rank(0)
    job.wait_for(lambda: re.search(r" [1-9]\d*/100000 ", "".join(job.err))
                 or sum(server.cpu_times()[:2]) > 3.0, "first clocks")
    pid, seconds = job.kill_rank(0)
    assert_ended_cleanly(job, 0, pid, seconds, "parameter server")


DDP = ["-m", "minidist.examples.mlp_ddp", "--epochs", "8", "--hidden", "32",
       "--checkpoint-every", "25"]  # 45 steps an epoch: checkpoints within epochs too


def checkpoint_contents(folder: Path) -> tuple[str, dict]:
    with np.load(latest_checkpoint(folder)) as saved:
        return saved["meta"].item(), {name: saved[name] for name in saved.files}


@pytest.mark.timeout(180)
def test_ddp_killed_then_resumed_ends_equal_to_a_run_never_interrupted(jobs, tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    # 1. killed in the middle of training, once a checkpoint is there
    job = jobs(2, [*DDP, "--checkpoint-dir", str(resumed)])
    job.wait_for(lambda: resumed.is_dir() and latest_checkpoint(resumed), "checkpoint")
    pid, seconds = job.kill_rank(1)
    assert_ended_cleanly(job, 1, pid, seconds, "DDP training")
    # 2. the same command again resumes from the newest checkpoint, and ends
    out = jobs(2, [*DDP, "--checkpoint-dir", str(resumed)]).finish()
    step = int(re.search(r"resumed from \S+: step (\d+)", out)[1])
    assert 25 <= step < 8 * 45
    # 3. a run never interrupted ends with the same parameters, optimiser state and losses
    jobs(2, [*DDP, "--checkpoint-dir", str(whole)]).finish()
    meta, arrays = checkpoint_contents(whole)
    meta_resumed, arrays_resumed = checkpoint_contents(resumed)
    assert meta_resumed == meta and '"step": 360' in meta
    assert arrays_resumed.keys() == arrays.keys()
    for name, value in arrays.items():
        np.testing.assert_array_equal(arrays_resumed[name], value, err_msg=name)


def allreduce_forever(c, ready):
    x = np.ones(1 << 17)
    comm.allreduce(x, c, algorithm="ring")
    Path(ready, str(c.rank)).touch()
    for _ in range(20_000):
        comm.allreduce(x, c, algorithm="ring")


@pytest.mark.timeout(90)
def test_launch_names_a_rank_killed_in_an_allreduce(tmp_path):
    outcome = {}

    def run():
        try:
            comm.launch(allreduce_forever, 3, args=(str(tmp_path),), backend="mpi", timeout=60)
        except Exception as err:  # noqa: BLE001 (the test looks at what it is)
            outcome["error"] = err
        outcome["ended"] = time.monotonic()

    watcher = Watcher(os.getpid())
    thread = threading.Thread(target=run)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.iterdir())) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        pid = watcher.rank(1).pid
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
    finally:
        thread.join(90)
    seconds = outcome["ended"] - killed
    print(f"\nmd.launch: rank 1 killed, launch raised {seconds:.3f} s later")
    error = outcome.get("error")
    assert isinstance(error, comm.RankKilled), repr(error)
    assert error.rank == 1
    assert re.fullmatch(rf"rank 1 \(pid {pid} on \S+\) was killed by SIGKILL", str(error))
    assert seconds < BOUND
    assert watcher.survivors() == []


@pytest.mark.timeout(30)
def test_a_job_that_outlives_a_death_is_stopped_after_the_grace(capsys):
    # a stand-in for an mpiexec that reports a death and then does not end
    line = "minidist: rank 3 (pid 4242 on host) was killed by signal 9"
    command = ["sh", "-c", f"echo '{line}' >&2; exec sleep 60"]
    started = time.monotonic()
    end = run_job(command, dict(os.environ), timeout=20, grace=0.5)
    assert [(d.rank, d.pid, d.host, d.signal, d.name) for d in end.deaths] == \
        [(3, 4242, "host", 9, "SIGKILL")]
    assert str(end.deaths[0]) == "rank 3 (pid 4242 on host) was killed by SIGKILL"
    assert not end.timed_out and end.returncode == -signal.SIGTERM
    assert 0.5 <= end.ended - end.deaths[0].seen < 0.5 + KILL_GRACE
    assert time.monotonic() - started < 0.5 + KILL_GRACE + 5
    assert line in capsys.readouterr().err  # relayed as it came


def test_mpirun_usage_errors_exit_2(capsys):
    for argv in ([], ["-n", "two", "x.py"], ["-n", "2"], ["-n", "2", "--grace", "soon", "x.py"]):
        assert mpirun_main(argv) == 2
        assert "usage: minidist mpirun -n RANKS" in capsys.readouterr().err
