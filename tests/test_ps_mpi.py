"""The parameter server under a real mpiexec: it trains under BSP, SSP and ASP, one worker's
run equals the in-process one, and bad input ends every rank with a clear error.

One launch per configuration (starting MPI costs about a second); the ranks return their
``PSRun`` and the assertions are made here. No wall-clock figure is asserted.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from mpi_example import run_under_mpiexec
from test_launch import ProcessWatcher

import minidist as md
from minidist.comm import LocalCluster, RankError
from minidist.parallel.ps import ServerOptimizer
from minidist.parallel.ps.training import train_mlp

MPIEXEC = Path(sys.executable).parent / "mpiexec"
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]
STEPS = 60
MODES = [("bsp", None), ("ssp", 2), ("asp", None)]


def every_mode(c):
    return [train_mlp(c, steps=STEPS, consistency=mode, staleness=s) for mode, s in MODES]


@pytest.mark.timeout(120)
def test_one_server_two_workers_train_under_every_consistency_model():
    watcher = ProcessWatcher()
    ranks = md.launch(every_mode, 3, backend="mpi", timeout=100)
    assert watcher.survivors() == []
    for (mode, s), server, worker in zip(MODES, ranks[0], ranks[1], strict=True):
        assert server.accuracy >= 0.85, mode  # 91% in-process; chance is 10%
        reads = server.staleness.reads
        assert sum(reads.values()) == 2 * STEPS + 1, mode  # every pull, worker 0's last one
        assert sum(server.staleness.gradients.values()) == 2 * STEPS, mode
        if mode == "bsp":
            assert set(reads) == {0}
        if mode == "ssp":
            assert max(reads) <= s
        assert server.dropped == []
        assert worker.curve[-1][1] == STEPS  # worker 0 scored the last weights


def one_worker(c):
    return train_mlp(c, steps=20, eval_every=1, servers=2, consistency="ssp", staleness=1,
                     optimizer=ServerOptimizer("adam", lr=0.003))


@pytest.mark.timeout(90)
def test_two_servers_one_worker_under_mpi_equal_the_in_process_run():
    """One worker: its requests reach each server in one order only, so the runs must
    agree to rounding (1e-12): every clock's test loss and accuracy, and the final model's."""
    mpi = md.launch(one_worker, 3, backend="mpi", timeout=80)
    local = LocalCluster(3).run(one_worker)
    np.testing.assert_allclose(mpi[0].loss, local[0].loss, rtol=0, atol=1e-12)
    assert mpi[0].accuracy == local[0].accuracy
    mpi_curve, local_curve = np.array(mpi[2].curve), np.array(local[2].curve)
    assert mpi_curve.shape == local_curve.shape == (21, 4)
    np.testing.assert_array_equal(mpi_curve[:, 1], local_curve[:, 1])  # the clocks scored
    np.testing.assert_allclose(mpi_curve[:, 2:], local_curve[:, 2:], rtol=0, atol=1e-12)


def no_worker(c):
    return train_mlp(c, steps=5, servers=c.size)


@pytest.mark.timeout(60)
def test_a_run_without_workers_fails_on_every_rank_not_hangs():
    with pytest.raises(RankError, match="leave no worker"):
        md.launch(no_worker, 2, backend="mpi", timeout=50)


def run_example(*args: str, ranks: int = 4) -> subprocess.CompletedProcess:
    """``mpiexec -n ranks python -m mpi4py -m minidist.examples.ps_mlp args``, stopped with
    everything it started whatever happens."""
    return run_under_mpiexec(ranks, "minidist.examples.ps_mlp", list(args), timeout=100)


def none_left(watcher: ProcessWatcher) -> bool:
    """No process the job started outlives it by more than a few seconds (ranks that
    MPI_Abort ended may still be on their way out when mpiexec returns)."""
    _, alive = psutil.wait_procs(watcher.survivors(), timeout=10)
    return alive == []


@pytest.mark.timeout(120)
def test_the_example_trains_with_a_sleeping_straggler_and_rejects_bad_input(tmp_path):
    watcher = ProcessWatcher()
    plot = tmp_path / "loss.png"
    done = run_example("--consistency", "ssp", "--staleness", "2", "--straggler", "3:2",
                       "--steps", "30", "--eval-every", "5", "--plot", str(plot))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ssp(2), 1 server(s) + 3 worker(s), 30 clocks: test accuracy" in done.stdout
    assert int(done.stdout.split("read staleness max ")[1].split()[0]) <= 2
    assert plot.stat().st_size > 0

    bad = run_example("--servers", "4")
    assert bad.returncode != 0
    for rank in range(4):  # said on every rank, before any of them ended the job
        assert f"ps_mlp (rank {rank}): --servers 4 on 4 ranks" in bad.stderr, bad.stderr
    assert none_left(watcher)


def checkpointed(c, path, steps, resume, crash_at=None):
    """Two workers, BSP, Adam: least squares of test_ps, a checkpoint at clock 4; with
    ``crash_at``, worker 0's process is killed (SIGKILL) right after that checkpoint."""
    import os
    import signal

    from test_ps import INITIAL, LAYOUT, batch, gradient

    from minidist.parallel.ps import ParameterServer

    ps = ParameterServer(c, LAYOUT, consistency="bsp", checkpoint=path, resume=resume,
                         optimizer=ServerOptimizer("adam", lr=0.01))
    if ps.is_server:
        return ps.serve(INITIAL)
    worker, w = ps.worker(), c.rank - 1
    for t in range(worker.clock, steps):
        values = worker.pull(LAYOUT.all_keys())
        worker.push(LAYOUT.all_keys(), gradient(values, batch(t, w, 2)))
        worker.tick()
        if worker.clock == 4:
            worker.checkpoint()
            if crash_at == 4 and w == 0:
                os.kill(os.getpid(), signal.SIGKILL)
    worker.stop()
    return None


@pytest.mark.timeout(180)
def test_a_run_killed_after_its_checkpoint_resumes_to_the_uninterrupted_result(tmp_path):
    watcher = ProcessWatcher()
    whole = md.launch(checkpointed, 3, args=(str(tmp_path / "a"), 8, False), backend="mpi",
                      timeout=60)[0].values
    with pytest.raises((RankError, RuntimeError)):  # the job ends, it does not hang
        md.launch(checkpointed, 3, args=(str(tmp_path / "b"), 8, False, 4), backend="mpi",
                  timeout=60)
    assert watcher.survivors() == []
    assert (tmp_path / "b" / "shard-0.npz").exists()
    assert not [p for p in (tmp_path / "b").iterdir() if p.name.endswith(".tmp")]
    resumed = md.launch(checkpointed, 3, args=(str(tmp_path / "b"), 8, True), backend="mpi",
                        timeout=60)[0].values
    # BSP applies a clock's pushes in worker order under MPI, however they arrived
    assert np.array_equal(resumed, whole)
    assert watcher.survivors() == []
