"""Hogwild: lock-free GloVe workers in shared memory (``minidist.parallel.hogwild``'s
machinery, ``minidist.glove.hogwild``'s worker), against the sequential run."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
import types
from collections import namedtuple
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import psutil
import pytest
from sigterm import survivors_of_sigterm
from test_glove import random_cooccurrence

from minidist import glove
from minidist.parallel import hogwild, shared_arrays


@pytest.fixture(scope="module")
def problem():
    row, col, val = random_cooccurrence(2000, 60_000, seed=11)
    return glove.Records.from_counts(row, col, val), glove.GloVe.create(2000, 16, seed=3)


@pytest.fixture
def created_blocks(monkeypatch):
    """Record the names of the shared-memory blocks the parent creates."""
    names: list[str] = []

    class Recorded(shared_memory.SharedMemory):
        def __init__(self, name=None, create=False, size=0):
            super().__init__(name=name, create=create, size=size)
            if create:
                names.append(self.name)

    monkeypatch.setattr(shared_memory, "SharedMemory", Recorded)
    return names


def assert_cleaned_up(names: list[str]) -> None:
    assert names, "no shared block was created"
    for name in names:
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name=name)  # unlinked
    assert not [p for p in mp.active_children() if p.name.startswith("hogwild")]


@pytest.mark.timeout(60)
def test_one_worker_is_exactly_the_sequential_run(problem, created_blocks):
    records, start = problem
    sequential, parallel = start.copy(), start.copy()
    costs = glove.train(sequential, records, epochs=2, batch_size=1024, seed=5)
    run = glove.train_hogwild(parallel, records, workers=1, epochs=2, batch_size=1024,
                                seed=5, timeout=50)
    assert run.costs == costs
    for name, array in parallel.arrays().items():
        np.testing.assert_array_equal(array, sequential.arrays()[name])
    assert_cleaned_up(created_blocks)


@pytest.mark.timeout(90)
def test_two_workers_reach_the_sequential_loss(problem, created_blocks):
    """Equal updates: the same epochs, permutations and batch size, split over 2 workers.

    Bound: how close the two workers come to the sequential run depends on how
    the OS schedules them. A worker paused between reading rows and writing
    them back overwrites what the other wrote meanwhile; a machine's load
    decides how long such pauses are (within 1% on a quiet machine, 5% seen
    on a busy one). Short of losing most updates, whatever the scheduling,
    4 epochs beat one sequential epoch (the loss falls most in the first: 112 k,
    11.9 k after one epoch, 8.9 k after four). Batches of 256 over 2,000 words:
    glove.c's bias rule (rate 1) makes much larger ones unstable, and Hogwild's
    result with them.
    """
    records, start = problem
    sequential, first, parallel = start.copy(), start.copy(), start.copy()
    glove.train(sequential, records, epochs=4, batch_size=256, seed=2)
    glove.train(first, records, epochs=1, batch_size=256, seed=2)
    seen = []
    run = glove.train_hogwild(parallel, records, workers=2, epochs=4, batch_size=256,
                                seed=2, timeout=80, on_epoch=lambda e, c: seen.append((e, c)))
    assert [e for e, _ in seen] == [0, 1, 2, 3] and [c for _, c in seen] == run.costs
    assert all(b < a for a, b in zip(run.costs, run.costs[1:], strict=False)), run.costs
    reached = glove.loss(parallel, records)
    assert reached < glove.loss(first, records), (reached, glove.loss(sequential, records))
    assert not np.array_equal(parallel.word, sequential.word)  # another order of updates
    assert len(run.seconds) == 4 and all(s > 0 for s in run.seconds)
    assert_cleaned_up(created_blocks)


@pytest.mark.timeout(60)
def test_a_failing_worker_raises_with_its_traceback_and_cleans_up(problem, created_blocks):
    records, start = problem
    model = start.copy()
    with pytest.raises(RuntimeError, match="hogwild worker . failed") as failure:
        glove.train_hogwild(model, records, workers=2, epochs=1, batch_size=0, timeout=50)
    assert "Traceback" in str(failure.value)
    np.testing.assert_array_equal(model.word, start.word)  # untouched on failure
    assert_cleaned_up(created_blocks)


@pytest.mark.timeout(60)
def test_timeout_stops_the_workers_and_cleans_up(problem, created_blocks):
    records, start = problem
    with pytest.raises(TimeoutError):
        glove.train_hogwild(start.copy(), records, workers=2, epochs=50, batch_size=64,
                              timeout=1.0)
    assert_cleaned_up(created_blocks)


HANGING_WORKER = """
import os, sys, time
import numpy as np
from minidist.parallel import hogwild

def hang(shared, rank, workers, sync, folder):
    open(f"{folder}/worker{rank}", "w").write(str(os.getpid()))
    time.sleep(600)

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(__file__))
    import caller  # the worker's function by a module name the spawned workers import
    hogwild.run_hogwild(caller.hang, {"w": np.zeros(1000)}, 2, 1, ["w"],
                        args=(sys.argv[1],), timeout=300)
"""


@pytest.mark.timeout(90)
def test_sigterm_to_the_caller_stops_the_workers_and_unlinks_the_blocks(tmp_path):
    """SIGTERM ends the caller as Ctrl-C does (``terminated_like_interrupted``): by default
    it left both workers running and the shared blocks in /dev/shm."""
    script = tmp_path / "caller.py"
    script.write_text(HANGING_WORKER)
    shm = Path("/dev/shm")
    before = set(shm.glob("psm_*")) if shm.is_dir() else set()
    caller = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    try:
        assert survivors_of_sigterm(caller, tmp_path, ["worker0", "worker1"]) == []
        if shm.is_dir():
            assert set(shm.glob("psm_*")) - before == set()
    finally:
        caller.kill()
        for name in (tmp_path / f"worker{r}" for r in range(2)):
            if name.exists():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(name.read_text()), signal.SIGKILL)


def test_shared_arrays_round_trip_and_unlink():
    arrays = {"a": np.arange(12.0).reshape(3, 4), "ids": np.arange(5, dtype=np.int32),
              "empty": np.zeros(0)}
    owner = hogwild.SharedArrays.create(arrays)
    names = [name for name, _, _ in owner.spec().values()]
    other = hogwild.SharedArrays.attach(owner.spec())
    other["a"][1, 2] = -1.0  # a write through one mapping is seen through the other
    assert owner["a"][1, 2] == -1.0 and owner["ids"].dtype == np.int32
    np.testing.assert_array_equal(other["ids"], arrays["ids"])
    other.close()
    owner.close()
    for name in names:
        with pytest.raises(FileNotFoundError):
            shared_memory.SharedMemory(name=name)


@pytest.mark.timeout(120)
def test_reports_of_short_epochs_are_counted_per_epoch(created_blocks):
    """Three workers, many short epochs: a fast worker's report of epoch e+1 can reach
    the parent before a slow worker's report of epoch e; every epoch still counts its own."""
    row, col, val = random_cooccurrence(500, 12_000, seed=5)
    records, start = glove.Records.from_counts(row, col, val), glove.GloVe.create(500, 8, seed=1)
    run = glove.train_hogwild(start, records, workers=3, epochs=6, batch_size=512, timeout=100)
    assert len(run.costs) == 6 and all(np.isfinite(run.costs))
    assert_cleaned_up(created_blocks)


shutil_usage = namedtuple("shutil_usage", "total used free")


def test_arrays_of_objects_and_blocks_dev_shm_has_no_room_for_are_refused(monkeypatch):
    """Objects: the workers read the parent's pointers and died of SIGSEGV. Too big: the
    copy into the block killed the parent with SIGBUS, without a word."""
    with pytest.raises(TypeError, match="shared array 'o' holds Python objects"):
        hogwild.SharedArrays.create({"o": np.array([object()], dtype=object)})
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    monkeypatch.setattr(shared_arrays.shutil, "disk_usage",
                        lambda path: shutil_usage(total=1 << 30, used=0, free=1 << 20))
    with pytest.raises(MemoryError, match=r"need 8\.0 MiB but /dev/shm has 1\.0 MiB free"):
        hogwild.SharedArrays.create({"w": np.zeros(1 << 20)})


def test_an_array_held_after_close_stays_readable():
    """close() unmapped the block under it: reading it crashed the interpreter."""
    shared = hogwild.SharedArrays.create({"a": np.arange(4.0)})
    name = shared.spec()["a"][0]
    held = shared["a"][1:]
    shared.close()
    assert held.sum() == 6.0
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)  # its name is gone all the same


def reports_once_then_returns(shared, rank, workers, sync):
    for epoch in range(1 if rank == 1 else 3):
        sync.begin(epoch)
        sync.report(epoch, 0.0)


@pytest.mark.timeout(60)
def test_a_worker_that_returns_before_its_last_epoch_is_named_at_once(created_blocks):
    """Only the timeout (300 s by default) caught it, with a message naming no worker."""
    with pytest.raises(RuntimeError, match="hogwild worker 1 returned after reporting 1 of 3"):
        hogwild.run_hogwild(reports_once_then_returns, {"w": np.zeros(4)}, 2, 3, ["w"],
                            timeout=50)
    assert_cleaned_up(created_blocks)


@pytest.mark.timeout(90)
def test_workers_end_with_a_parent_killed_outright(tmp_path):
    """Killed with SIGKILL (the OOM killer), the parent stops no one: its workers ran on
    for their whole run, ignoring its timeout."""
    script = tmp_path / "caller.py"
    script.write_text(HANGING_WORKER)
    caller = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    files = [tmp_path / f"worker{r}" for r in range(2)]
    try:
        deadline = time.monotonic() + 60
        while not all(f.exists() and f.read_text() for f in files):
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.1)
        pids = [int(f.read_text()) for f in files]
        caller.kill()
        caller.wait()
        deadline = time.monotonic() + 10
        while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                  for p in pids):
            assert time.monotonic() < deadline, "a worker outlived its killed parent"
            time.sleep(0.1)
    finally:
        for name in files:
            if name.exists() and name.read_text():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(name.read_text()), signal.SIGKILL)


INTERACTIVE_CALLER = """
import numpy as np
from minidist.parallel import hogwild

def interactive(shared, rank, workers, sync):
    sync.begin(0)
    sync.report(0, 0.0)

try:
    hogwild.run_hogwild(interactive, {"w": np.zeros(4)}, 2, 1, ["w"], timeout=30)
except ValueError as error:
    print(error)
"""


@pytest.mark.timeout(60)
def test_a_target_of_an_interactive_main_is_refused_before_the_workers_start():
    """``python -c`` (or a notebook): every worker died unpickling the target, and the caller
    saw only their exit codes; the reason went to the workers' stderr."""
    done = subprocess.run([sys.executable, "-c", INTERACTIVE_CALLER], capture_output=True,
                          text=True, timeout=50)
    assert "hogwild target 'interactive' is defined in an interactive __main__" in done.stdout
    assert "Traceback" not in done.stderr  # no worker started, so none failed


@pytest.mark.timeout(60)
def test_a_target_the_workers_cannot_import_is_reported_with_the_reason(monkeypatch,
                                                                        created_blocks):
    """A module only the parent has (as a function defined under a script's ``if __name__
    == "__main__":``): the parent got exit codes, the reason only the workers' stderr."""
    module = types.ModuleType("hogwild_parent_only")
    exec("def target(shared, rank, workers, sync):\n    pass", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with pytest.raises(RuntimeError, match="worker cannot import the hogwild target "
                                           r"\(No module named 'hogwild_parent_only'\)"):
        hogwild.run_hogwild(module.target, {"w": np.zeros(4)}, 2, 1, ["w"], timeout=50)
    assert_cleaned_up(created_blocks)


def test_shared_arrays_as_a_context_manager_leave_nothing_in_dev_shm():
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    with pytest.raises(KeyError), hogwild.SharedArrays.create(
            {"a": np.arange(3.0), "b": np.zeros(2)}) as shared:
        names = [name.lstrip("/") for name, _, _ in shared.spec().values()]
        assert all((shm / name).exists() for name in names)
        assert shared["a"].sum() == 3.0
        shared["missing"]  # the body raises: the blocks go all the same
    assert not [name for name in names if (shm / name).exists()]
    assert not shared.blocks and not shared.arrays
