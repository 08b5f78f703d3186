"""Stragglers: in synchronous data parallelism one slow rank slows every rank down.

These are real clocks, so the checks must hold on a machine whose cores are
kept busy by other work. The model is tiny: a step computes in about a
millisecond, and the injected delay (0.2 s) is a hundred times that. So the
checks are lower bounds that load cannot break (every rank's step lasts at
least the delay) and comparisons whose two sides differ by the delay (a fast
rank waits it out, the straggler does not), which load would have to stretch
a step's work a hundredfold to overturn.
"""

import sys
import time
from pathlib import Path

import numpy as np
import pytest

import minidist as md
from minidist.bench.ddp import straggler_trial
from minidist.comm import Straggler
from minidist.viz import plot_timeline, summarize

SIZES, BATCH, STEPS, DELAY = [16, 32, 4], 8, 4, 0.2
MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.timeout(60)
def test_a_sleeping_rank_makes_every_rank_wait_and_the_trace_shows_it(tmp_path):
    """In-process ranks take turns on one thread, so DataParallel reduces its buckets after
    backward, on the main lane: a fast rank's wait for the straggler is inside those
    allreduces (comm), not a wait for a communication thread."""
    results = md.launch(straggler_trial, 3, args=(SIZES, BATCH, STEPS, DELAY, 2),
                        backend="local", timeout=50)
    totals = summarize([r["trace"] for r in results])
    after_backward = [total["comm"] + total["wait"] for total in totals]
    for rank, (result, total) in enumerate(zip(results, totals, strict=True)):
        assert result["own_step"] >= DELAY  # every rank's step pays the straggler's delay
        kinds = [kind for kind, *_ in result["trace"]]
        assert kinds.count("compute") == STEPS and kinds.count("comm") >= STEPS
        if rank != 2:  # fast ranks: most of the delay is spent waiting after backward
            assert after_backward[rank] >= 0.5 * STEPS * DELAY
            assert total["compute"] < after_backward[rank]
    assert totals[2]["compute"] >= STEPS * DELAY  # the straggler sleeps inside its compute
    assert after_backward[2] < min(after_backward[0], after_backward[1])

    path = tmp_path / "timeline.png"
    plot_timeline([r["trace"] for r in results], path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


@pytest.mark.timeout(60)
def test_the_in_process_straggler_option_delays_every_rank():
    trial = (SIZES, BATCH, 2, 0.0, 1, 1)  # 2 steps after 1 of warm-up
    fast = md.launch(straggler_trial, 2, args=trial, backend="local")
    slow = md.launch(straggler_trial, 2, args=trial, backend="local",
                     stragglers={1: Straggler(delay=DELAY, sleep=True)})
    for rank in range(2):  # rank 1 sleeps before each message it sends: rank 0 waits for it
        assert slow[rank]["own_step"] >= DELAY > fast[rank]["own_step"]


def test_summarize_adds_up_each_kind():
    traces = [[("compute", "main", 0.0, 1.0), ("wait", "main", 1.0, 1.5),
               ("comm", "comm", 0.5, 1.5)], [("compute", "main", 0.0, 1.4)]]
    assert summarize(traces) == [{"compute": 1.0, "comm": 1.0, "wait": 0.5},
                                 {"compute": 1.4, "comm": 0.0, "wait": 0.0}]


@pytest.mark.mpi
@pytest.mark.timeout(60)
@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")
def test_a_sleeping_rank_under_mpi_slows_every_rank():
    results = md.launch(straggler_trial, 2, args=(SIZES, BATCH, 3, DELAY, 1), backend="mpi",
                        timeout=50)
    for result in results:
        assert result["own_step"] >= DELAY
    waits = summarize([r["trace"] for r in results])
    assert waits[0]["wait"] > waits[1]["wait"]
    assert np.isclose(results[0]["step"], results[1]["step"])  # the slowest rank's, everywhere


def test_the_recorder_times_blocks_from_its_origin():
    from minidist.parallel.timing import TraceRecorder

    readings = iter([10.0, 12.0, 12.5, 14.0])  # a clock read at: creation, start, the block
    recorder = TraceRecorder(clock=lambda: next(readings))
    recorder.add("comm", 0.0, 1.0, lane="comm")
    recorder.start()  # forgets the earlier interval, time 0 is now
    with recorder.interval("compute"):
        pass
    assert recorder.to_list() == [("compute", "main", 0.5, 2.0)]
    assert TraceRecorder().clock is time.perf_counter  # the wall clock by default
    with pytest.raises(ValueError, match="kind"):
        recorder.add("sleep", 0.0, 1.0)
