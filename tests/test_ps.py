"""Parameter servers on in-process ranks: against one process, the consistency invariants,
traffic, failures, checkpoints and bad input.

The workload is least squares, ``y ≈ x W + b``, float64: every worker's
gradient is exact arithmetic on data chosen by (clock, worker), so a
distributed run can be replayed by one process. Tolerance 1e-12 where the
order of floating-point additions differs, bit for bit where it cannot.
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ps_construction import construction_traffic

from minidist.comm import LocalCluster, RankFailure, Straggler
from minidist.nn import Parameter
from minidist.optim import SGD, AdaGrad, Adam
from minidist.parallel.ps import (
    KeyLayout,
    ParameterServer,
    ServerOptimizer,
    gather_reports,
    messages,
)
from minidist.util.mpiexec import mpi_vendor, mpiexec_command

FEATURES, OUTPUTS, BATCH, STEPS = 5, 3, 8, 6
LAYOUT = KeyLayout({"W": (FEATURES, OUTPUTS), "b": (1, OUTPUTS)})
DATA = np.random.default_rng(0)
X, Y = DATA.normal(size=(256, FEATURES)), DATA.normal(size=(256, OUTPUTS))
INITIAL = LAYOUT.flatten({"W": DATA.normal(size=(FEATURES, OUTPUTS)), "b": np.zeros(OUTPUTS)})


def batch(clock: int, worker: int, workers: int) -> slice:
    start = ((clock * workers + worker) * BATCH) % len(X)
    return slice(start, start + BATCH)


def gradient(flat: np.ndarray, rows: slice) -> np.ndarray:
    W, b = flat[:FEATURES * OUTPUTS].reshape(FEATURES, OUTPUTS), flat[FEATURES * OUTPUTS:]
    residual = X[rows] @ W + b - Y[rows]
    return np.concatenate([(X[rows].T @ residual / BATCH).ravel(), residual.mean(0)])


def train(c, servers=1, steps=STEPS, compute=None, fused=False, **options):
    """Every rank: serve, or pull-compute-push-tick ``steps`` times (``fused``: the push,
    the tick and the next pull as one ``push_pull``, as ``train_mlp`` does). Workers
    return their clock; servers their reports."""
    ps = ParameterServer(c, LAYOUT, servers=servers, **options)
    if ps.is_server:
        return ps.serve(INITIAL)
    worker, w = ps.worker(), c.rank - servers
    workers, keys = c.size - servers, LAYOUT.all_keys()
    values = worker.pull(keys) if fused and worker.clock < steps else None
    for t in range(worker.clock, steps):
        if not fused:
            values = worker.pull(keys)
        c.compute(compute(t, w) if compute else 1e-3)
        grad = gradient(values, batch(t, w, workers))
        if fused and t + 1 < steps:
            values = worker.push_pull(keys, grad)
        else:
            worker.push(keys, grad)
            worker.tick()
    worker.stop()
    return worker.clock


def final(results, servers=1):
    return gather_reports(results[:servers], LAYOUT)


def reference(optimizer_class, steps=STEPS, workers=1, **hyper):
    """One process: the same gradients, in worker order each clock (BSP's order when
    workers compute equally long), on a minidist optimiser."""
    param = Parameter(INITIAL.copy())
    opt = optimizer_class([param], **hyper)
    for t in range(steps):
        grads = [gradient(param.data, batch(t, w, workers)) for w in range(workers)]
        for g in grads:
            param.grad = g
            opt.step()
    return param.data


@pytest.mark.parametrize("servers", [1, 2, 3])
@pytest.mark.parametrize("rule, optimizer_class, hyper", [
    ("sgd", SGD, dict(lr=0.1)),
    ("adagrad", AdaGrad, dict(lr=0.1, eps=1e-8)),
    ("adam", Adam, dict(lr=0.01, eps=1e-8)),
])
def test_one_worker_trains_as_one_process(servers, rule, optimizer_class, hyper):
    results = LocalCluster(servers + 1).run(
        lambda c: train(c, servers, optimizer=ServerOptimizer(rule, **hyper)))
    np.testing.assert_allclose(final(results, servers), reference(optimizer_class, **hyper),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("servers", [1, 2])
def test_bsp_applies_each_workers_gradient_in_turn(servers, fused):
    results = LocalCluster(servers + 3).run(
        lambda c: train(c, servers, fused=fused, consistency="bsp"))
    np.testing.assert_allclose(final(results, servers), reference(SGD, workers=3, lr=0.1),
                               rtol=0, atol=1e-12)
    reports = results[:servers]
    assert all(r.staleness.reads == {0: 3 * STEPS} for r in reports)
    assert all(r.requests["PUSH"] + r.requests["PUSH_PULL"] == 3 * STEPS
               and r.requests["PUSH_PULL"] == (3 * (STEPS - 1) if fused else 0)
               and r.requests["STOP"] == 3 for r in reports)


def test_softsync_one_averages_every_workers_gradient_as_synchronous_sgd():
    results = LocalCluster(4).run(lambda c: train(c, 1, consistency="bsp", softsync=1))
    param = INITIAL.copy()
    for t in range(STEPS):
        param -= 0.1 * np.mean([gradient(param, batch(t, w, 3)) for w in range(3)], axis=0)
    np.testing.assert_allclose(final(results), param, rtol=0, atol=1e-12)
    assert results[0].version == STEPS  # one update per clock: c = 3 gradients each


@pytest.mark.parametrize("stops", [True, False])
def test_softsync_after_a_worker_leaves_averages_the_workers_left(stops):
    """Worker 2 leaves after 2 clocks, with STOP or without a word. Once c = ⌊λ/n⌋ = 3
    stayed: every later update waited for 3 gradients from 2 workers, mixing clocks, and
    the last 2 gradients were never applied."""
    leave = 2

    def body(c):
        ps = ParameterServer(c, LAYOUT, consistency="bsp", softsync=1)
        if ps.is_server:
            return ps.serve(INITIAL)
        worker, w, keys = ps.worker(), c.rank - 1, LAYOUT.all_keys()
        for t in range(STEPS):
            if w == 2 and t == leave:
                return worker.stop() if stops else None
            values = worker.pull(keys)
            worker.push(keys, gradient(values, batch(t, w, 3)))
            worker.tick()
        worker.stop()

    results = LocalCluster(4).run(body, timeout=30)
    param = INITIAL.copy()
    for t in range(STEPS):
        live = range(3) if t < leave else range(2)
        param -= 0.1 * np.mean([gradient(param, batch(t, w, 3)) for w in live], axis=0)
    np.testing.assert_allclose(final(results), param, rtol=0, atol=1e-12)
    assert results[0].version == STEPS


def random_compute(seed, workers):
    rng = np.random.default_rng(seed)
    table = rng.exponential(1e-3, size=(STEPS, workers)) * (1 + np.arange(workers))
    return lambda t, w: float(table[t, w])


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**16), workers=st.integers(2, 4), staleness=st.integers(0, 3),
       fused=st.booleans())
def test_ssp_reads_are_never_more_than_s_clocks_stale(seed, workers, staleness, fused):
    compute = random_compute(seed, workers)
    cluster = LocalCluster(1 + workers, stragglers={1: Straggler(slowdown=3.0)})
    results = cluster.run(lambda c: train(c, 1, compute=compute, fused=fused,
                                          consistency="ssp", staleness=staleness))
    reads = results[0].staleness.reads
    assert sum(reads.values()) == workers * STEPS
    assert max(reads) <= staleness


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), workers=st.integers(2, 4), fused=st.booleans())
def test_ssp_zero_equals_bsp_bit_for_bit_and_reruns_are_identical(seed, workers, fused):
    compute = random_compute(seed, workers)

    def run(**rule):
        cluster = LocalCluster(1 + workers, stragglers={workers: Straggler(slowdown=2.0)})
        results = cluster.run(lambda c: train(c, 1, compute=compute, fused=fused, **rule))
        return final(results), results[0].staleness, max(s.clock for s in cluster.stats)

    bsp, ssp0, again = run(consistency="bsp"), run(consistency="ssp", staleness=0), \
        run(consistency="bsp")
    assert np.array_equal(bsp[0], ssp0[0]) and np.array_equal(bsp[0], again[0])
    assert bsp[1] == ssp0[1] and bsp[2] == ssp0[2] == again[2]


def test_asp_lets_the_fast_worker_run_ahead_and_reports_staleness():
    straggler = {2: Straggler(slowdown=4.0)}
    clocks = {}
    for rule in ("bsp", "asp"):
        cluster = LocalCluster(3, stragglers=straggler)
        results = cluster.run(lambda c: train(c, 1, consistency=rule, steps=12))  # noqa: B023
        clocks[rule] = cluster.stats[1].clock  # the fast worker's finishing time
        logs = results[0].staleness
    assert clocks["asp"] < 0.5 * clocks["bsp"]
    assert max(logs.reads) >= 2 and max(logs.gradients) >= 2  # reported, not bounded
    assert "staleness  reads  gradients" in logs.table()


@pytest.mark.parametrize("riding", ["all", "keys", "none"])
def test_traffic_matches_the_cost_in_the_docstrings(monkeypatch, riding):
    # what of a payload rides in its header's message; the rest follows in one message
    k = [LAYOUT.split(2)[s][1] - LAYOUT.split(2)[s][0] for s in range(2)]
    v = [int(LAYOUT.offsets[e] - LAYOUT.offsets[f]) for f, e in LAYOUT.split(2)]
    inline_bytes = {"all": messages.INLINE_BYTES, "keys": 8 * max(k), "none": 0}[riding]
    monkeypatch.setattr(messages, "INLINE_BYTES", inline_bytes)
    keys = LAYOUT.num_keys
    values = LAYOUT.num_values
    built = construction_traffic(3)[2]  # the agreement on the job, before any key moves
    cluster = LocalCluster(3)
    cluster.run(lambda c: train(c, 2))
    worker = cluster.stats[2]
    assert 0 < 8 * k[0] + 8 * v[0] <= messages.INLINE_BYTES or riding != "all"
    apart = riding != "all"  # a push is then two messages; a pull too if its keys follow
    pull_apart = riding == "none"
    per_step_sent = sum(2 * 48 + 8 * k[s] + (8 * k[s] + 8 * v[s]) + 48 for s in range(2))
    per_step_recv = sum((8 + 8 * v[s]) + 8 for s in range(2))
    assert sum(k) == keys and sum(v) == values
    # pull 1 (2), push 1 (2), tick 1, per server; stop
    assert worker.messages_sent - built.messages_sent == STEPS * 2 * (3 + apart + pull_apart) + 2
    assert worker.bytes_sent - built.bytes_sent == STEPS * per_step_sent + 2 * 48
    assert worker.messages_recv - built.messages_recv == STEPS * 2 * 2
    assert worker.bytes_recv - built.bytes_recv == STEPS * per_step_recv
    # push_pull: a push's header and payload, a pull's answer; the first pull and the
    # last push and tick apart
    cluster = LocalCluster(3)
    cluster.run(lambda c: train(c, 2, fused=True))
    fused = cluster.stats[2]
    for counter in ("messages_sent", "bytes_sent", "messages_recv", "bytes_recv"):
        setattr(fused, counter, getattr(fused, counter) - getattr(built, counter))
    pull_sent = sum(48 + 8 * k[s] for s in range(2))
    push_sent = sum(48 + 8 * k[s] + 8 * v[s] for s in range(2))
    pull_recv = sum(8 + 8 * v[s] for s in range(2))
    # with a payload: the first pull, the push_pulls, the last push; then tick and stop
    assert fused.messages_sent == 2 * (1 + pull_apart) + ((STEPS - 1) * 2 + 2) * (1 + apart) + 4
    assert fused.bytes_sent == pull_sent + STEPS * push_sent + 2 * 48 + 2 * 48
    assert fused.messages_recv == 2 + (STEPS - 1) * 2 + 2
    assert fused.bytes_recv == STEPS * pull_recv + 2 * 8


def test_a_dead_worker_is_dropped_and_the_others_finish(capfd):
    def body(c):
        try:
            return train(c, 1, consistency="ssp", staleness=1, steps=10)
        except RankFailure:
            return "died"

    results = LocalCluster(4, failures={2: 12}).run(body)
    assert results[2] == "died" and results[1] == results[3] == 10
    assert results[0].dropped == [1]
    assert "worker 1 (rank 2) is gone, dropped from the clocks" in capfd.readouterr().err


@pytest.mark.mpi
@pytest.mark.skipif(mpi_vendor() != "openmpi", reason="needs an MPI with fault tolerance: Open "
                    "MPI's ULFM (make test MPI=openmpi); MPICH's wheel has none (README)")
def test_under_mpi_with_fault_tolerance_a_killed_worker_is_dropped():
    from mpi_example import run_mpi_command

    script = Path(__file__).with_name("mpi_ps_worker_dies.py")
    run = run_mpi_command(mpiexec_command(4, [str(script)], mpiexec_args=["--with-ft", "ulfm"]),
                          4, timeout=60)
    assert run.returncode == 0, run.stderr
    assert sorted(run.stdout.splitlines()) == ["rank 0: [1]", "rank 1: 10", "rank 3: 10"]
    assert "worker 1 (rank 2) is gone, dropped from the clocks: rank 2 failed" in run.stderr


def test_checkpoint_and_resume_end_as_an_uninterrupted_run(tmp_path):
    def body(c, path, steps, resume, checkpoint_at=None):
        ps = ParameterServer(c, LAYOUT, consistency="ssp", staleness=1, checkpoint=path,
                             resume=resume, optimizer=ServerOptimizer("adam", lr=0.01))
        if ps.is_server:
            return ps.serve(INITIAL)
        worker, w = ps.worker(), c.rank - 1
        for t in range(worker.clock, steps):
            values = worker.pull(LAYOUT.all_keys())
            c.compute(1e-3 * (1 + w))
            worker.push(LAYOUT.all_keys(), gradient(values, batch(t, w, 2)))
            worker.tick()
            if worker.clock == checkpoint_at:
                worker.checkpoint()
        worker.stop()

    whole = LocalCluster(3).run(body, (tmp_path / "a", 8, False, 4))
    LocalCluster(3).run(body, (tmp_path / "b", 4, False, 4))  # "killed" after its checkpoint
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["shard-0.npz"]
    resumed = LocalCluster(3).run(body, (tmp_path / "b", 8, True))
    assert np.array_equal(final(whole), final(resumed))

    def two_servers(c):
        with pytest.raises(ValueError, match="saved by 1 server.s., and this run has 2"):
            ParameterServer(c, LAYOUT, servers=2, checkpoint=tmp_path / "b", resume=True)
        return True

    assert LocalCluster(4).run(two_servers) == [True] * 4  # every rank, before any message


def test_the_mlp_run_gathers_every_servers_shard_and_logs_on_rank_0():
    from minidist.parallel.ps.training import train_mlp

    results = LocalCluster(5).run(lambda c: train_mlp(c, steps=6, servers=2, eval_every=3,
                                                      consistency="ssp", staleness=1))
    run, fused = results[0], results[0].requests["PUSH_PULL"]
    # per server and worker, every clock pushes and ticks: in one request with the next
    # clock's pull but at the last clock (worker 0 pulls there too, to score)
    assert fused == 2 * (3 * 5 + 1)
    assert run.requests["PUSH"] + fused == run.requests["CLOCK"] + fused == 2 * 3 * 6
    assert sum(run.staleness.reads.values()) == run.requests["PULL"] + fused
    assert max(run.staleness.reads) <= 1 and run.accuracy > 0.2
    assert results[1].requests["PUSH"] + results[1].requests["PUSH_PULL"] == 3 * 6  # its own
    assert len(results[2].curve) == 3  # worker 0 scores at clocks 0, 3 and 6


@pytest.mark.parametrize("servers", [1, 2])
@pytest.mark.parametrize(("table", "keys"), [
    ((64, 64), np.arange(64)),  # 32 KiB of rows in key order: sent as they lie
    ((64, 64), np.random.default_rng(1).permutation(64)[:40]),  # out of order: packed
    ((3000, 1), np.random.default_rng(2).permutation(3000)),  # keys too many to ride along
])
def test_long_pushes_apply_every_row_however_their_payload_travels(servers, table, keys):
    layout = KeyLayout({"E": table})
    initial = np.random.default_rng(0).normal(size=layout.num_values)
    grads = [np.random.default_rng(10 + step).normal(size=layout.value_count(keys))
             for step in range(3)]

    def run(c):
        ps = ParameterServer(c, layout, servers=servers)
        if ps.is_server:
            return ps.serve(initial)
        worker = ps.worker()
        pulled = [worker.pull(keys)]
        for grad in grads:
            worker.push(keys, grad)
            pulled.append(worker.pull(keys))
        worker.stop()
        return pulled

    results = LocalCluster(servers + 1).run(run)
    expected = initial.reshape(table).copy()
    np.testing.assert_array_equal(results[-1][0], expected[keys].ravel())
    for step, grad in enumerate(grads):
        expected[keys] -= 0.1 * grad.reshape(-1, table[1])  # SGD, lr 0.1
        np.testing.assert_allclose(results[-1][step + 1], expected[keys].ravel(), rtol=1e-14)
    np.testing.assert_allclose(gather_reports(results[:servers], layout), expected.ravel(),
                               rtol=1e-14)
