"""minidist.util: the helpers each written once (shuffle, downloads, process trees, mpiexec,
the registry of the library's lab answers)."""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from minidist.labkit import BlockedError, blocked
from minidist.util import epoch_order
from minidist.util.answers import answers_to, dotted_name, lab_answer
from minidist.util.download import ChecksumError, DownloadError, cache_folder, fetch, verify
from minidist.util.mpiexec import (
    ONE_THREAD,
    mpi_vendor,
    mpiexec_command,
    rank_environment,
    run_module_under_mpi,
)
from minidist.util.processes import stop_process_tree
from minidist.util.values import positive

# ---------------------------------------------------------------- the epoch shuffle


def test_epoch_order_depends_only_on_seed_and_epoch():
    first = epoch_order(50, seed=3, epoch=2)
    np.testing.assert_array_equal(first, epoch_order(50, 3, 2))
    assert sorted(first) == list(range(50)) and first.dtype == np.int64
    assert not np.array_equal(first, epoch_order(50, 3, 3))
    assert not np.array_equal(first, epoch_order(50, 4, 2))
    np.testing.assert_array_equal(first, np.random.default_rng((3, 2)).permutation(50))
    np.testing.assert_array_equal(epoch_order(5, 3, 2, shuffle=False), np.arange(5))


def test_epoch_order_names_bad_arguments():
    with pytest.raises(ValueError, match="n must be >= 0"):
        epoch_order(-1, 0, 0)
    with pytest.raises(ValueError, match="seed and epoch must be >= 0, got 0 and -1"):
        epoch_order(4, 0, -1)


# ---------------------------------------------------------------- verified downloads


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_fetch_from_a_file_url_then_from_the_cache(tmp_path):
    source = tmp_path / "served.bin"
    source.write_bytes(b"weights" * 1000)
    target = tmp_path / "cache" / "file.bin"
    assert fetch(source.as_uri(), target, sha256(source.read_bytes())) == target
    assert target.read_bytes() == source.read_bytes()

    def must_not_open(url):
        raise AssertionError(f"opened {url} although the cached copy is verified")

    assert fetch("https://example.invalid/x", target, sha256(source.read_bytes()),
                 opener=must_not_open) == target


def test_fetch_tries_each_url_and_names_every_failure(tmp_path):
    data = b"the right bytes"
    served = {"https://a/x": b"the wrong bytes", "https://c/x": data}

    def opener(url):
        if url not in served:
            raise OSError("connection refused")
        return io.BytesIO(served[url])

    target = tmp_path / "x"
    fetch(["https://a/x", "https://b/x", "https://c/x"], target, sha256(data), opener)
    assert target.read_bytes() == data
    target.unlink()
    with pytest.raises(DownloadError) as error:
        fetch(["https://a/x", "https://b/x"], target, sha256(data), opener)
    message = str(error.value)
    assert "https://a/x: ChecksumError" in message and "https://b/x: OSError" in message
    assert f"copy x into {tmp_path} by hand" in message
    assert list(tmp_path.iterdir()) == []  # no half-written file under any name


def test_fetch_replaces_a_damaged_copy_and_unpacks(tmp_path):
    target = tmp_path / "member"
    target.write_bytes(b"damaged")

    def unpack(downloaded, out):
        out.write_bytes(downloaded.read_bytes().upper())

    fetch("https://x/archive", target, sha256(b"PAYLOAD"),
          opener=lambda url: io.BytesIO(b"payload"), unpack=unpack)
    assert target.read_bytes() == b"PAYLOAD"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["member"]


def test_verify_takes_md5_sha256_or_a_function(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    verify(path, "md5:" + hashlib.md5(b"abc").hexdigest())
    verify(path, hashlib.sha256(b"abc").hexdigest().upper())  # bare digest: SHA-256
    with pytest.raises(ChecksumError, match="sha256 ba7816bf.*expected 00"):
        verify(path, "sha256:00")

    def three_bytes(p):
        if p.stat().st_size != 3:
            raise ChecksumError("not 3 bytes")

    verify(path, three_bytes)
    with pytest.raises(ValueError, match="unknown hash 'sha1:ab'"):
        fetch("https://x/", tmp_path / "g", "sha1:ab", opener=lambda url: io.BytesIO(b""))


def test_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIDIST_DATA", str(tmp_path))
    assert cache_folder("text8") == tmp_path / "text8"
    monkeypatch.delenv("MINIDIST_DATA")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_folder("mnist") == tmp_path / "home" / ".cache" / "minidist" / "mnist"


# ---------------------------------------------------------------- process trees

STUBBORN_TREE = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends this one
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a child
middle = os.fork()
if middle == 0:  # a double fork: an orphan, out of the tree but still in the group
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)
os.waitpid(middle, 0)  # the orphan's parent has exited
print("ready", flush=True)
time.sleep(600)
"""


def alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(30)
def test_a_process_tree_ends_whole_even_when_it_ignores_sigterm():
    root = subprocess.Popen([sys.executable, "-c", STUBBORN_TREE], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert root.stdout.readline() == b"ready\n"
    group = [p for p in psutil.process_iter() if _pgid(p.pid) == root.pid and alive(p)]
    assert len(group) == 3, "the root, its child and the orphan"
    stop_process_tree(root, grace=0.5)  # the processes sleep 600 s: only a stop ends them
    assert root.returncode == -signal.SIGKILL  # it ignored SIGTERM
    assert [p.pid for p in group if alive(p)] == []
    root.stdout.close()


# like an MPI rank whose proxy died as it started it: a session of its own, adopted by init
ESCAPED_ORPHAN = """
import os, sys, time
if os.fork() == 0:
    os.setsid()  # out of the group and the session: only its environment tells whose it is
    print(os.getpid(), flush=True)
    time.sleep(600)
"""


@pytest.mark.timeout(30)
def test_an_orphan_in_a_session_of_its_own_ends_by_the_mark_in_its_environment():
    mark = f"MINIDIST_TEST_JOB={os.getpid()}-orphan"
    root = subprocess.Popen([sys.executable, "-c", ESCAPED_ORPHAN], stdout=subprocess.PIPE,
                            start_new_session=True,
                            env={**os.environ, "MINIDIST_TEST_JOB": mark.partition("=")[2]})
    orphan = psutil.Process(int(root.stdout.readline()))
    root.wait()  # the root has ended: neither its tree nor its group holds the orphan
    assert _pgid(orphan.pid) == orphan.pid != root.pid
    stop_process_tree(root, grace=0.5, mark=mark)
    assert not alive(orphan)
    root.stdout.close()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _ignore_sigterm_then_sleep(ready):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(600)


@pytest.mark.timeout(120)
def test_worker_processes_end_and_keep_their_exit_codes():
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    stubborn = context.Process(target=_ignore_sigterm_then_sleep, args=(ready,), daemon=True)
    polite = context.Process(target=time.sleep, args=(600,), daemon=True)
    never_started = context.Process(target=time.sleep, args=(600,))
    stubborn.start()
    polite.start()
    assert ready.wait(90)  # a spawned interpreter imports this module first
    stop_process_tree(stubborn, polite, never_started, grace=0.5)
    assert (polite.exitcode, stubborn.exitcode) == (-signal.SIGTERM, -signal.SIGKILL)
    stop_process_tree(stubborn, polite)  # already ended: nothing to do, no error


# ---------------------------------------------------------------- the mpiexec command


def test_rank_environment_one_thread_and_heavy_yield_past_the_cores():
    cores = os.cpu_count() or 1
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "8"}
    assert rank_environment(cores, base) == {"PATH": "/bin", **ONE_THREAD}
    assert rank_environment(cores + 1, base)["MPIR_CVAR_ENABLE_HEAVY_YIELD"] == "1"
    assert set(ONE_THREAD) == {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}


def test_mpiexec_command_is_the_one_next_to_python(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "mpiexec")):
        mpiexec_command(2, ["-m", "x"])
    (tmp_path / "mpiexec").touch()
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:3\n")
    assert mpiexec_command(3, ["-m", "x", "--flag"], hosts, ["-ppn", "1"]) == [
        str(tmp_path / "mpiexec"), "-f" if mpi_vendor() == "mpich" else "--hostfile",
        str(hosts), "-ppn", "1", "-n", "3",
        str(tmp_path / "python"), "-m", "mpi4py", "-m", "x", "--flag"]
    with pytest.raises(ValueError, match="at least one rank, got 0"):
        mpiexec_command(0, ["-m", "x"])


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.skipif(not (Path(sys.executable).parent / "mpiexec").exists(), reason="no mpiexec")
def test_a_module_runs_under_mpi(capfd):
    assert run_module_under_mpi("mpi4py.bench", 2, ["helloworld"]) == 0
    out = capfd.readouterr().out
    assert "process 0 of 2" in out and "process 1 of 2" in out


# ---------------------------------------------------------------- lab answers, blocked by task


def test_blocked_by_task_id_blocks_the_task_and_its_lab_then_restores():
    from minidist.comm import NetworkModel, cost
    from minidist.parallel.replicas import broadcast_parameters

    expected = cost.predict("ring", 4, 1024, network=NetworkModel(1e-6, 1e-9, 0.0))
    with blocked("lab03_cost"):
        with pytest.raises(BlockedError, match="write your own predict"):
            cost.predict("ring", 4, 1024)
    assert cost.predict("ring", 4, 1024, network=NetworkModel(1e-6, 1e-9, 0.0)) == expected
    names = [dotted_name(f) for f in answers_to("lab04_lr_schedule")]
    assert "minidist.optim.schedules.linear_scaling" in names  # the task's own answer
    assert "minidist.parallel.replicas.broadcast_parameters" in names  # registered for Lab 4
    with blocked("lab04"), pytest.raises(BlockedError, match="broadcast_parameters"):
        broadcast_parameters(None, None)
    with blocked("minidist.autograd.ops.Mul.backward"), pytest.raises(BlockedError,
                                                                     match="Mul.backward"):
        answers_to("lab01_backward_mul")[0](None, None)


def test_task_ids_are_checked():
    with pytest.raises(ValueError, match="not a task id: 'ring'"):
        answers_to("ring")
    with pytest.raises(LookupError, match="no library function .* 'lab01_train_mlp'"):
        answers_to("lab01_train_mlp")
    with pytest.raises(ValueError, match="task ids like 'lab03_ring'"):
        lab_answer("Lab 3, Task 3")

    def outer():
        x = 1

        def closure():
            return x
        return closure

    with pytest.raises(TypeError, match="cannot be blocked: it is a closure"):
        lab_answer("lab09_never")(outer())


def test_importing_the_library_packages_registers_every_answer():
    """No @lab_answer sits in a module that the packages' own imports leave out."""
    count = ("import importlib, pkgutil, sys, minidist.util.answers as a\n"
             "a.import_library()\n"
             "if sys.argv[1] == 'all':\n"
             "    for package in a.LIBRARY:\n"
             "        root = importlib.import_module('minidist.' + package)\n"
             "        for m in pkgutil.walk_packages(root.__path__, root.__name__ + '.'):\n"
             "            importlib.import_module(m.name)\n"
             "print(sorted((k, len(v)) for k, v in a._answers.items()))\n")
    runs = [subprocess.run([sys.executable, "-c", count, which], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, **ONE_THREAD))
            for which in ("packages", "all")]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert runs[0].stdout == runs[1].stdout


@pytest.mark.parametrize("value", [0, -1.5, float("inf"), float("nan"), True, "2"])
def test_positive_refuses_what_is_not_a_finite_number_above_zero_in_one_sentence(value):
    """GloVe's x_max said '>= 0' for inf and True, MoE's capacity_factor for -1: finite's
    words, where 0 is refused too."""
    with pytest.raises(ValueError, match=r"^x_max must be a finite number > 0, got "):
        positive("x_max", value)
    assert positive("x_max", 2) == 2.0
