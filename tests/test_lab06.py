"""Lab 6's checks, run on the library's reference code, one pytest marker per task.

``pytest -m lab06_ssp_rule`` runs the check that grades Task 2 against the
library's ``SSP.may_serve``; the notebook and the library are held to the same
checks, and the solution's answers are the library's code (syntax trees
compared). Each claim a check makes rejects a known-wrong answer with the
sentence a student would read, and an answer that calls the library's own is
blocked.
"""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest
from notebook_source import SOLUTIONS, answer_function, code

from minidist.comm import allreduce
from minidist.labkit import BlockedError, CheckFailed
from minidist.labkit.lab06 import (
    check_shard_update,
    check_softsync,
    check_ssp_cases,
    check_ssp_run,
    check_staleness_lr,
)
from minidist.labkit.lab06_hotspots import (
    SAMPLE_CLOCKS,
    check_choose_hot_keys,
    check_replication,
    mf_run,
    plugged_in,
    without_hot_rows,
)
from minidist.optim import adagrad_rows
from minidist.parallel.ps import SSP, hotspots
from minidist.parallel.ps.hotspots import choose_hot_keys, read_rows, write_rows
from minidist.parallel.ps.rules import ShardState, SoftSync, staleness_lr

SOLUTION = SOLUTIONS / "lab06_parameter_servers" / "lab06_parameter_servers.ipynb"


def answer_method(class_name: str, name: str) -> ast.FunctionDef:
    """The method ``name`` of the class ``class_name`` defined in a code cell of the solution."""
    for cell in json.loads(SOLUTION.read_text())["cells"]:
        if cell["cell_type"] == "code":
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.ClassDef) and node.name == class_name:
                    return next(f for f in node.body
                                if isinstance(f, ast.FunctionDef) and f.name == name)
    raise LookupError(f"{SOLUTION} defines no {class_name}.{name}")


@pytest.mark.parametrize("answer, library", [
    (("MyShard", "apply"), ShardState.apply),
    (("MySSP", "may_serve"), SSP.may_serve),
    (("MySoftSync", "add"), SoftSync.add),
    ("staleness_lr", staleness_lr),
    ("choose_hot_keys", choose_hot_keys),
    ("read_rows", read_rows),
    ("write_rows", write_rows),
])
def test_the_solutions_are_the_library_code(answer, library):
    tree = answer_method(*answer) if isinstance(answer, tuple) else answer_function(SOLUTION,
                                                                                    answer)
    assert code(tree) == code(library)


# --- Task 1 ----------------------------------------------------------------------------------
@pytest.mark.lab06_shard_update
@pytest.mark.parametrize("rule", ["sgd", "adagrad", "adam"])
def test_shard_update(rule):
    check_shard_update(ShardState, rule, block=())
    check_shard_update(ShardState, rule, rows=9, width=2, pushes=9, lr=0.3, seed=11, block=())
    check_shard_update(ShardState, rule, lr=0.05, eps=1e-8, scale=1e-7, seed=12, block=())


class OneStepCount(ShardState):
    """Adam corrected with the shard's version as everybody's t."""

    def apply(self, index, grad):
        (b1, b2), (steps, first, second) = self.optimizer.betas, self.moments
        t = self.version + 1
        first[index] = b1 * first[index] + (1 - b1) * grad
        second[index] = b2 * second[index] + (1 - b2) * grad ** 2
        steps[index] += 1
        m_hat, s_hat = first[index] / (1 - b1 ** t), second[index] / (1 - b2 ** t)
        self.values[index] -= self.optimizer.lr * m_hat / (np.sqrt(s_hat) + self.optimizer.eps)
        self.version += 1


class GloveOrder(ShardState):
    """AdaGrad dividing by G before this gradient's square is added."""

    def apply(self, index, grad):
        opt = self.optimizer
        self.values[index] -= opt.lr * grad / (np.sqrt(self.sums[index]) + opt.eps)
        self.sums[index] += grad ** 2
        self.version += 1


class Replaces(ShardState):
    """SGD that makes a new values array."""

    def apply(self, index, grad):
        values = self.values.copy()
        values[index] -= self.optimizer.lr * grad
        self.values = values
        self.version += 1


class EveryValue(ShardState):
    """AdaGrad on the whole shard, the gradient spread with zeros."""

    def apply(self, index, grad):
        dense = np.zeros_like(self.values)
        dense[index] = grad
        adagrad_rows(self.values, self.sums, slice(None), dense, self.optimizer.lr,
                     self.optimizer.eps, convention="textbook")
        self.version += 1


class NoVersion(ShardState):
    def apply(self, index, grad):
        self.values[index] -= self.optimizer.lr * grad


class OwnState(ShardState):
    """AdaGrad right on the values, its G kept in an array of its own."""

    def apply(self, index, grad):
        if not hasattr(self, "g"):
            self.g = np.zeros_like(self.values)
        self.g[index] += grad ** 2
        self.values[index] -= self.optimizer.lr * grad / (np.sqrt(self.g[index])
                                                          + self.optimizer.eps)
        self.version += 1


class CallsTheLibrary(ShardState):
    def apply(self, index, grad):
        super().apply(index, grad)


@pytest.mark.parametrize("wrong, rule, eps, message", [
    (OneStepCount, "adam", 1e-8, r"push 2 .*Adam with one step count for the whole shard"),
    (GloveOrder, "adagrad", 1e-8, r"push 1 .*values: differs.* divided by G before adding"),
    (Replaces, "sgd", 0.0, r"push 1 .*arrays were replaced by new ones.* in place"),
    (EveryValue, "adagrad", 0.0, r"push 1 .*changed values at values never pushed.*NaN"),
    (NoVersion, "sgd", 0.0, r"push 1 .*the version is 0, expected 1"),
    (OwnState, "adagrad", 1e-8, r"push 1 .*, sums: differs.* did not change: keep the"),
])
def test_shard_update_rejects(wrong, rule, eps, message):
    with pytest.raises(CheckFailed, match=message):
        check_shard_update(wrong, rule, eps=eps)


def test_shard_update_blocks_the_library():
    with pytest.raises(BlockedError, match="write your own ShardState.apply"):
        check_shard_update(CallsTheLibrary, "sgd")


# --- Task 2 ----------------------------------------------------------------------------------
@pytest.mark.lab06_ssp_rule
@pytest.mark.timeout(120)
def test_ssp_rule():
    for s in range(6):
        check_ssp_cases(SSP, s, seed=s, block=())
    check_ssp_run(SSP, staleness=2, workers=3, block=())
    check_ssp_run(SSP, staleness=1, workers=4, steps=12, seed=21, block=())
    check_ssp_run(SSP, staleness=0, workers=2, seed=22, block=())


class Strict(SSP):
    def may_serve(self, clock, clocks):
        return clock - min(clocks, default=clock) < self.staleness


class Fastest(SSP):
    def may_serve(self, clock, clocks):
        return max(clocks, default=clock) - clock <= self.staleness


class NoDefault(SSP):
    def may_serve(self, clock, clocks):
        return clock - min(clocks) <= self.staleness


class Always(SSP):
    def may_serve(self, clock, clocks):
        return True


class OneBehind(SSP):
    """SSP(s - 1) inside: never wrong about a read it serves, but makes it wait too long."""

    def may_serve(self, clock, clocks):
        return clock - min(clocks, default=clock) <= self.staleness - 1


class Inherited(SSP):
    def may_serve(self, clock, clocks):
        return super().may_serve(clock, clocks)


def test_ssp_rule_rejects_a_strict_bound_the_fastest_worker_and_an_empty_list():
    with pytest.raises(CheckFailed, match=r"Strict\(1\).*returned False; the read is 1 clock\(s\) "
                                          r"stale.* at most s = 1: expected True"):
        check_ssp_cases(Strict, 1)
    with pytest.raises(CheckFailed, match=r"Fastest\(0\).*returned False; the read is 0 clock"):
        check_ssp_cases(Fastest, 0)
    with pytest.raises(CheckFailed, match=r"clocks=\[\]\) raised ValueError.*nobody to wait for"):
        check_ssp_cases(NoDefault, 2)
    with pytest.raises(BlockedError, match="write your own SSP.may_serve"):
        check_ssp_cases(Inherited, 2)


@pytest.mark.timeout(120)
def test_ssp_run_rejects_unbounded_reads_and_reads_kept_waiting():
    with pytest.raises(CheckFailed, match=r"answered reads up to \d+ clocks stale.* at most 1"):
        check_ssp_run(Always, staleness=1, workers=3)
    with pytest.raises(CheckFailed, match=r"the reads' staleness was \{0: \d+, 1: \d+\}.* as soon"):
        check_ssp_run(OneBehind, staleness=2, workers=3)


# --- Task 3 ----------------------------------------------------------------------------------
@pytest.mark.lab06_softsync
def test_softsync():
    for lr0 in (0.1, 2.5):
        check_staleness_lr(staleness_lr, lr0, block=())
    check_softsync(SoftSync, rows=5, width=2, c=3, adds=7, block=())
    check_softsync(SoftSync, rows=4, width=3, c=1, adds=3, seed=1, block=())
    check_softsync(SoftSync, rows=7, width=1, c=4, adds=9, seed=31, block=())


def test_staleness_lr_rejects_one_more_a_product_and_the_library():
    with pytest.raises(CheckFailed, match=r"tau=1\) returned 0.05, expected 0.1.*tau = 1"):
        check_staleness_lr(lambda lr0, tau: lr0 / (tau + 1), 0.1)
    with pytest.raises(CheckFailed, match=r"tau=2\) returned 0.2, expected 0.05"):
        check_staleness_lr(lambda lr0, tau: lr0 * tau, 0.1)
    with pytest.raises(BlockedError, match="write your own staleness_lr"):
        check_staleness_lr(staleness_lr, 0.1)


class Unscaled(SoftSync):
    def add(self, keys, index, grad, scale):
        self.total[index] += grad
        self.touched[keys] = True
        self.count += 1
        return self.count == self.c


class Averages(SoftSync):
    def add(self, keys, index, grad, scale):
        self.total[index] += scale * grad / self.c
        self.touched[keys] = True
        self.count += 1
        return self.count == self.c


class Untouched(SoftSync):
    def add(self, keys, index, grad, scale):
        self.total[index] += scale * grad
        self.count += 1
        return self.count == self.c


class Silent(SoftSync):
    def add(self, keys, index, grad, scale):
        self.total[index] += scale * grad
        self.touched[keys] = True
        self.count += 1


class Overwrites(SoftSync):
    def add(self, keys, index, grad, scale):
        self.total[index] = scale * grad
        self.touched[keys] = True
        self.count += 1
        return self.count == self.c


class AnswersWithNumpy(SoftSync):
    """Right, answering with a numpy bool (np.equal), which the text's "True" accepts."""

    def add(self, keys, index, grad, scale):
        self.total[index] += scale * grad
        self.touched[keys] = True
        self.count += 1
        return np.equal(self.count, self.c)


def test_softsync_accepts_a_numpy_bool():
    check_softsync(AnswersWithNumpy, rows=5, width=2, c=3, adds=7)


class AddsThroughTheLibrary(SoftSync):
    def add(self, keys, index, grad, scale):
        return super().add(keys, index, grad, scale)


@pytest.mark.parametrize("wrong, message", [
    (Unscaled, r"add 1 .*total: differs.* -- that is the sum without the scales"),
    (Averages, r"add 1 .*total: differs.* -- add sums .*take\(\) divides by c"),
    (Untouched, r"add 1 .*touched is \[\], expected keys"),
    (Silent, r"add 1 .*add returned None; expected count 1 and False"),
    (Overwrites, r"add 2 .*total: differs"),
])
def test_softsync_rejects(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_softsync(wrong, rows=5, width=2, c=3, adds=7)


def test_softsync_blocks_the_library():
    with pytest.raises(BlockedError, match="write your own SoftSync.add"):
        check_softsync(AddsThroughTheLibrary, rows=5, width=2, c=3, adds=7)


# --- Task 4 ----------------------------------------------------------------------------------
@pytest.mark.lab06_hot_keys
@pytest.mark.timeout(120)
def test_hot_keys():
    check_choose_hot_keys(choose_hot_keys, [5, 5, 5, 2, 2, 9, 9, 1], 2, block=())
    check_choose_hot_keys(choose_hot_keys, [3, 1, 3, 1, 7], 5, block=())
    check_choose_hot_keys(choose_hot_keys, [4, 4], 0, block=())
    check_choose_hot_keys(choose_hot_keys, np.random.default_rng(41).zipf(1.5, 300) % 40, 10,
                          block=())
    for ties, hot in ((TIED, 6), (np.r_[np.repeat(np.arange(2, 50), 2), 5, 44, 44], 7)):
        check_choose_hot_keys(choose_hot_keys, ties, hot, block=())
    library = dict(choose_hot_keys=choose_hot_keys, read_rows=read_rows, write_rows=write_rows)
    check_replication(**library, servers=3, workers=2, hot=32, block=())
    check_replication(**library, servers=2, workers=3, hot=24, seed=41, block=())
    check_replication(**library, servers=4, workers=2, hot=40, steps=5, seed=42, block=())
    for hot, batch, servers, workers, seed in SMALL_CASES:
        check_replication(**library, servers=servers, workers=workers, hot=hot, batch=batch,
                          seed=seed, block=())


TIED = np.r_[np.repeat(np.arange(3, 60, 2), 2), 9, 9, 31]  # 29 keys, 26 of them tied
# (hot, batch, servers, workers, seed): the notebook's runs with no replica, and with small
# batches some of which hold no hot row
SMALL_CASES = [(0, 64, 2, 2, 0), (2, 4, 2, 2, 0), (0, 64, 3, 3, 43), (4, 4, 2, 3, 41)]


def test_the_small_batch_runs_hold_batches_without_hot_rows():
    for hot, batch, _, workers, seed in SMALL_CASES:
        if hot:
            data = hotspots.ratings(num_users=300, num_items=300, count=4000, dim=4, seed=seed)
            layout = hotspots.mf_layout(data, 4)
            sample = hotspots.sample_access(data, layout, SAMPLE_CLOCKS, workers, batch, 0)
            assert without_hot_rows(data, choose_hot_keys(sample, hot), workers, 6, batch)


def test_plugged_in_swaps_the_loops_functions_and_restores_them():
    data = hotspots.ratings(num_users=100, num_items=100, count=1000, dim=4)
    seen = []

    def counting(accessed, hot):
        seen.append(hot)
        return choose_hot_keys(accessed, hot)

    results, load = mf_run(data, 2, 2, 8, 3, "plugged", choose_hot_keys=counting)
    assert seen == [8, 8, 8, 8] and hotspots.choose_hot_keys is choose_hot_keys
    assert len(load) == 2 and all(r.hot_keys.size == 8 for r in results[2:])
    with pytest.raises(AttributeError, match="has no"):
        with plugged_in(hotspots, no_such_function=counting):
            pass


def library_choose(accessed, hot):  # choose_hot_keys, unblocked
    keys, counts = np.unique(accessed, return_counts=True)
    return np.sort(keys[np.lexsort((keys, -counts))[:hot]])


def larger_on_ties(accessed, hot):
    keys, counts = np.unique(accessed, return_counts=True)
    return np.sort(keys[np.lexsort((-keys, -counts))[:hot]])


def unsorted(accessed, hot):
    keys, counts = np.unique(accessed, return_counts=True)
    return keys[np.lexsort((keys, -counts))[:hot]]


def unstable(accessed, hot):  # np.argsort's default sort breaks ties either way past 16 keys
    # (which keys it drops depends on numpy's version and the CPU's vector sort: not tested)
    keys, counts = np.unique(accessed, return_counts=True)
    return np.sort(keys[np.argsort(-counts)[:hot]])


def test_choose_hot_keys_rejects_ties_to_the_larger_key_an_unsorted_answer_and_the_library():
    with pytest.raises(CheckFailed, match=r"returned array\(\[5, 9\]\), expected \[2, 5\].*ties"):
        check_choose_hot_keys(larger_on_ties, [5, 5, 5, 2, 2, 9, 9, 1], 2)
    check_choose_hot_keys(unstable, [5, 5, 5, 2, 2, 9, 9, 1], 2, block=())  # 4 keys: stable
    with pytest.raises(CheckFailed, match=r"a sample of 61 requests of 29 distinct keys, hot=6\) "
                       r"returned .* it took keys \[\d+\] and left out keys \[\d+\], each "
                       r"requested 2 times: a tie, which goes to the smaller key"):
        check_choose_hot_keys(unstable, TIED, 6)
    with pytest.raises(CheckFailed, match=r"returned array\(\[5, 2\]\).*sorted"):
        check_choose_hot_keys(unsorted, [5, 5, 5, 2, 2, 9, 9, 1], 2)
    with pytest.raises(BlockedError, match="write your own choose_hot_keys"):
        check_choose_hot_keys(choose_hot_keys, [1, 1, 2], 1)


def pulls_everything(worker, keys, hot_keys, replica, dim):
    table = worker.pull(keys).reshape(-1, dim)
    hot = np.isin(keys, hot_keys)
    if hot.any():
        table[hot] = replica[np.searchsorted(hot_keys, keys[hot])]
    return table


def library_read(worker, keys, hot_keys, replica, dim):  # read_rows, unblocked
    hot = np.isin(keys, hot_keys)
    table = np.empty((keys.size, dim))
    table[~hot] = worker.pull(keys[~hot]).reshape(-1, dim)
    table[hot] = replica[np.searchsorted(hot_keys, keys[hot])]
    return table


def library_write(worker, group, keys, hot_keys, replica, grad, lr, combine=True, mean=False,
                  push_all=False):
    hot = np.isin(keys, hot_keys)
    worker.push(keys if push_all else keys[~hot], grad if push_all else grad[~hot])
    if replica is not None:
        summed = np.zeros_like(replica)
        summed[np.searchsorted(hot_keys, keys[hot])] = grad[hot]
        if combine:
            allreduce(summed, group, op="sum", out=summed)
        replica -= lr * summed / (group.size if mean else 1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("read, write, message", [
    (pulls_everything, library_write, r"the servers moved .*bytes.* never pulled from or pushed"),
    (library_read, lambda *a: library_write(*a, push_all=True), r"never pulled from or pushed"),
    (library_read, lambda *a: library_write(*a, combine=False),
     r"worker 1's replica of the hot rows differs from worker 0's"),
    (library_read, lambda *a: library_write(*a, mean=True),
     r"the trained model .*against the plain servers' model.*: differs"),
])
def test_replication_rejects(read, write, message):
    with pytest.raises(CheckFailed, match=message):
        check_replication(choose_hot_keys, read, write, servers=3, workers=2, hot=32,
                          block=())


def skips_the_allreduce(worker, group, keys, hot_keys, replica, grad, lr):
    hot = np.isin(keys, hot_keys)
    worker.push(keys[~hot], grad[~hot])
    if replica is not None and hot.any():  # wrong: every worker calls it at every clock
        summed = np.zeros_like(replica)
        summed[np.searchsorted(hot_keys, keys[hot])] = grad[hot]
        allreduce(summed, group, op="sum", out=summed)
        replica -= lr * summed


def no_replica_case(worker, group, keys, hot_keys, replica, grad, lr):
    hot = np.isin(keys, hot_keys)
    worker.push(keys[~hot], grad[~hot])
    summed = np.zeros_like(replica)  # wrong: replica is None when hot = 0
    summed[np.searchsorted(hot_keys, keys[hot])] = grad[hot]
    allreduce(summed, group, op="sum", out=summed)
    replica -= lr * summed


@pytest.mark.timeout(120)
@pytest.mark.parametrize("choose, write, hot, batch, message", [
    (choose_hot_keys, skips_the_allreduce, 32, 64, None),  # every batch of 64 holds a hot row
    (choose_hot_keys, skips_the_allreduce, 2, 4, r"hot = 2, 6 clocks, batches of 4 ratings: "
     r"the ranks deadlocked: at clock 1 worker 1's batch holds no hot row, and every worker "
     r"calls allreduce at every clock.*The transport said: .*deadlock"),
    (choose_hot_keys, no_replica_case, 32, 64, None),
    (choose_hot_keys, no_replica_case, 0, 64, r"hot = 0, .*rank \d raised \w+Error.* -- with "
     r"hot = 0 nothing is replicated: hot_keys is empty and replica is None"),
    (unstable, library_write, 32, 64, r"your choose_hot_keys did not return the 32 most "
     r"requested keys, sorted, of the sample train_mf counts \(1399 requests of 370 distinct "
     r"keys\) -- it took keys \[\d+\] and left out keys \[\d+\], each requested 11 times"),
])
def test_replication_rejects_what_the_edges_show(choose, write, hot, batch, message):
    def run():
        check_replication(choose, library_read, write, servers=2 if hot < 32 else 3,
                          workers=2, hot=hot, batch=batch, block=())
    if message is None:
        run()  # passes the run the notebook had before, which is why the edges are there
    else:
        with pytest.raises(CheckFailed, match=message):
            run()


@pytest.mark.timeout(120)
def test_replication_blocks_the_library():
    with pytest.raises(BlockedError, match="write your own write_rows"):
        check_replication(library_choose, library_read, write_rows, servers=2, workers=2,
                          hot=8, steps=2)

