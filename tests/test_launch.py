"""``launch``: results back by rank, exceptions with rank and traceback, no process left behind."""

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from sigterm import survivors_of_sigterm

import minidist.comm as comm
from minidist.comm import RankError
from minidist.comm.transport.mpirun import JOB_MARK
from minidist.util.mpiexec import env_args, rank_environment
from minidist.util.processes import stop_process_tree
from minidist.util.shm import (
    OPEN_MPI_SEGMENTS,
    PREFIX,
    SHM,
    TOPOLOGY_FILES,
    paths_in_use,
    remove_left_segments,
)

MPIEXEC = Path(sys.executable).parent / "mpiexec"
mpi_only = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")
needs_mpi = [pytest.mark.mpi, mpi_only]

SCALE = 3.0  # a module global the shipped function reads: the module travels by value


@pytest.fixture(autouse=True)
def no_process_of_a_job_is_left():
    """After each test, no process carries the mark of a job this process started
    (``mpirun.JOB_MARK``): not even a rank in a session of its own whose proxy died."""
    yield
    left = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(JOB_MARK, "").startswith(f"{os.getpid()}-"):
                left.append(" ".join(proc.cmdline()))
    assert left == []


def _helper(rank):
    return SCALE * rank


def uses_module_helpers(c, offset):
    """A test-module function, calling another: both must reach the MPI ranks."""
    total = np.array([_helper(c.rank) + offset])
    got = np.empty(1)
    c.sendrecv(total, (c.rank + 1) % c.size, got, (c.rank - 1) % c.size)
    return float(got[0])


@pytest.mark.parametrize("backend", ["local", pytest.param("mpi", marks=needs_mpi)])
@pytest.mark.timeout(60)
def test_results_come_back_in_rank_order(backend):
    p = 3
    assert comm.launch(uses_module_helpers, p, args=(0.5,), backend=backend) == [
        SCALE * ((r - 1) % p) + 0.5 for r in range(p)]


@pytest.mark.parametrize("backend", ["local", pytest.param("mpi", marks=needs_mpi)])
@pytest.mark.timeout(60)
def test_a_closure_and_a_lambda_defined_here_work(backend):
    weights = np.arange(4.0)  # captured by the closure

    def weighted(c, factor):
        return float(weights[c.rank] * factor)

    assert comm.launch(weighted, 4, args=(2.0,), backend=backend) == [0.0, 2.0, 4.0, 6.0]
    assert comm.launch(lambda c: (c.rank, c.size), 2, backend=backend) == [(0, 2), (1, 2)]


@pytest.mark.parametrize("backend", ["local", pytest.param("mpi", marks=needs_mpi)])
@pytest.mark.timeout(60)
def test_a_rank_exception_names_the_rank_and_carries_its_traceback(backend):
    def second_rank_fails(c):
        if c.rank == 1:
            raise KeyError("missing gradient")
        c.recv(np.empty(1), 1)  # would wait forever for rank 1

    # the other ranks are stopped, not waited for: had they been, the launch would end in a
    # TimeoutError
    with pytest.raises(RankError, match="rank 1 raised KeyError: 'missing gradient'") as info:
        comm.launch(second_rank_fails, 3, backend=backend, timeout=45)
    assert info.value.rank == 1
    assert "second_rank_fails" in info.value.traceback_text
    assert isinstance(info.value.__cause__, KeyError)


class ProcessWatcher:
    """Records every process this test process starts while a launch runs (mpiexec, its
    proxies, the ranks), with the session mpiexec leads, so we can check none survive."""

    def __init__(self):
        # children that were already there (e.g. multiprocessing's resource tracker, which
        # an earlier test's shared memory started and which lives as long as pytest)
        self.before = {p.pid for p in psutil.Process().children(recursive=True)}
        self.seen: dict[int, psutil.Process] = {}
        self.sessions: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.stop.wait(0.05):
            for proc in psutil.Process().children(recursive=True):
                if proc.pid in self.before:
                    continue
                self.seen.setdefault(proc.pid, proc)
                with contextlib.suppress(psutil.Error, ProcessLookupError):
                    self.sessions.add(os.getsid(proc.pid))

    def survivors(self):
        self.stop.set()
        self.thread.join()
        alive = [p for p in self.seen.values()
                 if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        for proc in psutil.process_iter():  # also anything left in mpiexec's session
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getsid(proc.pid) in self.sessions - {os.getsid(0)}:
                    alive.append(proc)
        return alive


@pytest.mark.timeout(30)
def test_a_segment_its_ranks_still_map_goes_once_they_have_ended():
    """An aborted job's ranks may outlive its mpiexec by a moment: removing at once left the
    segment of bench.model_parallel --ranks 3 behind in 1 run of 3; ``wait`` looks again."""
    if not SHM.is_dir():
        pytest.skip("no /dev/shm here")
    since = time.time()
    segment = SHM / f"{PREFIX}test{os.getpid()}_late"
    segment.write_bytes(b"\0" * 4096)
    rank = subprocess.Popen([sys.executable, "-c", "import mmap, sys, time\n"
                             f"f = open({str(segment)!r}, 'r+b')\n"
                             "m = mmap.mmap(f.fileno(), 4096)\n"
                             "print(flush=True); time.sleep(0.5)"], stdout=subprocess.PIPE)
    try:
        rank.stdout.readline()  # it maps the segment now
        assert remove_left_segments(since) == [] and segment.exists()
        assert remove_left_segments(since, wait=10) == [segment] and not segment.exists()
        assert rank.poll() is not None  # removed only once the rank had ended
    finally:
        rank.kill()
        rank.wait()
        segment.unlink(missing_ok=True)


@pytest.mark.mpi
@mpi_only
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 3])
def test_a_timeout_ends_every_process(world_size):
    def sleeps(c):
        time.sleep(600 if c.rank else 0.1)  # only a stop ends this job before the test's timeout

    watcher = ProcessWatcher()
    with pytest.raises(TimeoutError, match="within 2 s"):
        comm.launch(sleeps, world_size, backend="mpi", timeout=2)
    assert len(watcher.seen) >= 1 + world_size  # it did see mpiexec and the ranks
    assert watcher.survivors() == []


def mpich_segments() -> set[str]:
    return {p.name for p in SHM.glob(f"{PREFIX}*")} if SHM.is_dir() else set()


@pytest.mark.mpi
@mpi_only
@pytest.mark.timeout(120)
def test_a_failed_job_leaves_no_shared_memory_behind():
    """MPICH removes its /dev/shm segment in MPI_Finalize only; a job that aborts or is
    stopped once left one behind (3 MB each, for as long as the machine runs)."""
    def fails(c):
        if c.rank == 1:
            raise ValueError("boom on 1")
        c.barrier()

    before = mpich_segments()
    with pytest.raises(RankError, match="boom on 1"):
        comm.launch(fails, 3, backend="mpi", timeout=60)
    with pytest.raises(TimeoutError):
        comm.launch(lambda c: time.sleep(600 if c.rank else 0.1), 2, backend="mpi", timeout=3)
    in_use = paths_in_use()  # another job's, running beside this test: not left behind
    assert {name for name in mpich_segments() - before if str(SHM / name) not in in_use} == set()


@pytest.mark.mpi
@mpi_only
@pytest.mark.timeout(120)
def test_a_rank_that_exits_without_a_word_is_named_with_its_status():
    """A rank's os._exit (or a crash in native code) leaves no result and no exception; its
    guard names it, and the error says what it said (once it said nothing)."""
    def exits(c):
        if c.rank == 1:
            os._exit(3)
        c.barrier()

    with pytest.raises(RuntimeError, match=r"ended without a result(?s:.*)rank 1 \(pid \d+ on "
                                           r"\S+\) exited with status 3"):
        comm.launch(exits, 3, backend="mpi", timeout=60)


def test_only_segments_nobody_maps_are_removed(tmp_path):
    if not SHM.is_dir():
        pytest.skip("no /dev/shm here")
    import mmap

    since = time.time()
    used, left = (SHM / f"{PREFIX}test{os.getpid()}_{k}" for k in (0, 1))
    for path in (used, left):
        path.write_bytes(b"\0" * 4096)
    with open(used, "r+b") as file, mmap.mmap(file.fileno(), 4096):  # mapped by this process
        assert remove_left_segments(since) == [left]
        assert used.exists() and not left.exists()
    used.unlink()


def test_open_mpis_segments_a_stopped_job_left_are_removed_too():
    """A killed rank of an Open MPI job left /dev/shm/sm_segment.* (16 MiB each) behind."""
    folder, prefix = OPEN_MPI_SEGMENTS
    if not folder.is_dir():
        pytest.skip(f"no {folder} here")
    since = time.time()
    left = folder / f"{prefix}test.{os.getpid()}.0"
    left.write_bytes(b"\0" * 4096)
    assert remove_left_segments(since) == [left] and not left.exists()


def test_only_topology_files_nobody_holds_open_are_removed():
    """Hydra's proxy holds its /tmp/hydra_hwloc_xmlfile_* open while its job runs; a killed
    job's stays behind (743 of them had piled up here), an open one is another job's."""
    folder, prefix = TOPOLOGY_FILES
    if not folder.is_dir():
        pytest.skip(f"no {folder} here")
    since = time.time()
    held, left = (folder / f"{prefix}test{os.getpid()}_{k}" for k in (0, 1))
    for path in (held, left):
        path.write_text("<topology/>")
    with open(held):
        assert remove_left_segments(since) == [left]
        assert held.exists() and not left.exists()
    held.unlink()


@pytest.mark.mpi
@mpi_only
@pytest.mark.timeout(120)
def test_sigterm_to_the_caller_still_stops_the_job(tmp_path):
    """SIGTERM (what timeout, Slurm and Kubernetes send) ends the caller by an exception, so
    the job is stopped as on Ctrl-C; by default it would have left mpiexec and the ranks."""
    script = tmp_path / "caller.py"
    script.write_text(
        "import os, sys, time\n"
        "import minidist as md\n"
        "def sleeper(c):\n"
        f"    open(f'{tmp_path}/rank{{c.rank}}', 'w').write(str(os.getpid()))\n"
        "    time.sleep(600)\n"
        "md.launch(sleeper, 2, backend='mpi', timeout=300)\n")
    caller = subprocess.Popen([sys.executable, str(script)], env=rank_environment(2))
    try:
        assert survivors_of_sigterm(caller, tmp_path, ["rank0", "rank1"]) == []
    finally:  # the caller, and (if this test fails) whatever its job left
        stop_process_tree(caller, mark=f"{JOB_MARK}={caller.pid}-0")


@pytest.mark.mpi
@mpi_only
@pytest.mark.timeout(60)
def test_mpi_ranks_get_one_thread_their_output_relayed_and_extra_args(capsys, tmp_path):

    def report(c):
        sys.stdout.write(f"hello from rank {c.rank}\n")
        sys.stdout.flush()
        return os.environ["OMP_NUM_THREADS"], os.environ.get("MINIDIST_TEST_VALUE")

    hostfile = tmp_path / "hosts"
    hostfile.write_text(socket.gethostname() + "\n")  # a cluster of this one host
    results = comm.launch(report, 2, backend="mpi", hostfile=hostfile,
                          mpiexec_args=env_args("MINIDIST_TEST_VALUE", "42"))
    assert results == [("1", "42"), ("1", "42")]
    out = capsys.readouterr().out
    assert "hello from rank 0" in out and "hello from rank 1" in out


def test_heavy_yield_only_when_ranks_outnumber_cores(monkeypatch):
    monkeypatch.delenv("MPIR_CVAR_ENABLE_HEAVY_YIELD", raising=False)
    cores = os.cpu_count() or 1
    assert "MPIR_CVAR_ENABLE_HEAVY_YIELD" not in rank_environment(cores)
    assert rank_environment(cores + 1)["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "1"
    assert rank_environment(1)["OPENBLAS_NUM_THREADS"] == "1"


def test_a_missing_mpiexec_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "mpiexec")):
        comm.launch(lambda c: None, 2, backend="mpi")


def test_an_unknown_backend_is_named():
    with pytest.raises(ValueError, match="unknown backend 'nccl'"):
        comm.launch(lambda c: None, 2, backend="nccl")


def test_local_options_reach_the_cluster():
    def one_message(c):
        if c.rank == 0:
            c.send(np.ones(8), 1)
        else:
            c.recv(np.empty(8), 0)
        return c.stats.copy()

    stats = comm.launch(one_message, 2, backend="local",
                        network=comm.NetworkModel(alpha=2.0, beta=0.5, gamma=0.0))
    assert stats[1].clock == 2.0 + 0.5 * 64
