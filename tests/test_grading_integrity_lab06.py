"""Lab 6's checks give the same verdict on the student's functions seen from the grader.

As in ``test_grading_integrity.py``, both ends run in one process
(``serve.answer`` as the channel). A shard is built and pushed to by
probes, on arrays mapped from files the check reads back itself; a server
consults the student's SSP rule by its answers; an accumulator's arrays
come back through a probe; Task 4's servers are the grader's and each
worker is lent to the student's ``read_rows`` and ``write_rows`` (in the
kernel, a ``RelayedWorker``), so the bytes the servers moved are counted on
the grader's ranks.
"""

from __future__ import annotations

import pytest
from student_kernel import both_ends, same_verdict, solution_namespace, verdict

from minidist.labkit.lab06 import (
    check_shard_update,
    check_softsync,
    check_ssp_cases,
    check_ssp_run,
    check_staleness_lr,
)
from minidist.labkit.lab06_hotspots import check_choose_hot_keys, check_replication

WRONG = '''
class ReplacingShard(ShardState):
    def apply(self, index, grad):
        values = self.values.copy()
        values[index] -= self.optimizer.lr * grad
        self.values = values
        self.version += 1


class StrictSSP(SSP):
    def may_serve(self, clock, clocks):
        return clock - min(clocks, default=clock) < self.staleness


class UnscaledSoftSync(SoftSync):
    def add(self, keys, index, grad, scale):
        self.total[index] += grad
        self.touched[keys] = True
        self.count += 1
        return self.count == self.c


def read_every_row(worker, keys, hot_keys, replica, dim):
    """Pulls the hot rows too: the servers' traffic is not reduced."""
    table = worker.pull(keys).reshape(-1, dim)
    hot = np.isin(keys, hot_keys)
    if hot.any():
        table[hot] = replica[np.searchsorted(hot_keys, keys[hot])]
    return table


def write_when_hot(worker, group, keys, hot_keys, replica, grad, lr):
    """Skips the allreduce when its batch holds no hot row: the others wait in theirs."""
    hot = np.isin(keys, hot_keys)
    worker.push(keys[~hot], grad[~hot])
    if replica is not None and hot.any():
        summed = np.zeros_like(replica)
        summed[np.searchsorted(hot_keys, keys[hot])] = grad[hot]
        allreduce(summed, group, op="sum", out=summed)
        replica -= lr * summed


class NumpySoftSync(SoftSync):
    def add(self, keys, index, grad, scale):
        self.total[index] += scale * grad
        self.touched[keys] = True
        self.count += 1
        return np.equal(self.count, self.c)


def read_rows_here(worker, keys, hot_keys, replica, dim):
    """The solution's read_rows, which first says what it was given as a worker."""
    if type(worker).__name__ != "Worker":
        raise TypeError(f"a {type(worker).__name__}")
    return read_rows(worker, keys, hot_keys, replica, dim)
'''

CHECKS = {
    "MyShard": lambda f: [check_shard_update(f, rule, rows=9, width=2, pushes=9, lr=0.3,
                                             seed=11) for rule in ("sgd", "adagrad", "adam")],
    "ReplacingShard": lambda f: check_shard_update(f, "sgd"),
    "MySSP": lambda f: (check_ssp_cases(f, 2, seed=22), check_ssp_run(f, 1, 4, 12, seed=21)),
    "StrictSSP": lambda f: check_ssp_cases(f, 1),
    "staleness_lr": lambda f: check_staleness_lr(f, 2.5),
    "MySoftSync": lambda f: check_softsync(f, rows=7, width=1, c=4, adds=9, seed=31),
    "UnscaledSoftSync": lambda f: check_softsync(f, rows=5, width=2, c=3, adds=7),
    "MyNumpySoftSync": lambda f: check_softsync(f, rows=5, width=2, c=3, adds=7),
    "choose_hot_keys": lambda f: check_choose_hot_keys(f, [8, 3, 3, 8, 6, 6, 0, 11], 3),
}


@pytest.fixture(scope="module")
def kernel():
    return both_ends(solution_namespace("lab06_parameter_servers",
                                        WRONG + "\n\nMyNumpySoftSync = NumpySoftSync\n"))


def replication(get, read: str, write: str) -> None:
    check_replication(get("choose_hot_keys"), get(read), get(write), servers=2, workers=3,
                      hot=24, seed=41)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("answer", sorted(CHECKS))
def test_each_check_gives_the_local_verdict(kernel, answer):
    local = same_verdict(lambda get: CHECKS[answer](get(answer)), kernel)
    assert (local == "passed") == answer.startswith(("My", "staleness", "choose"))


@pytest.mark.timeout(120)
def test_in_place_is_read_from_the_arrays_not_from_the_kernels_word(kernel, monkeypatch):
    """A shard that replaces its arrays, with the probe patched to say they were kept (in
    a graded kernel the student's code may do that): the arrays the check reads did not
    change, so the push fails on its values, both ways."""
    from minidist.labkit import lab06_shard

    honest = lab06_shard.pushed_once

    def forged(shard, files, index, grad):
        return honest(shard, files, index, grad)[0], True

    # as the kernel finds it: the module's name for the probe
    forged.__module__, forged.__qualname__ = lab06_shard.__name__, "pushed_once"
    monkeypatch.setattr(lab06_shard, "pushed_once", forged)
    local = same_verdict(lambda get: check_shard_update(get("ReplacingShard"), "sgd"), kernel)
    assert "push 1 (a slice), values" in local and "replaced" not in local


@pytest.mark.timeout(120)
def test_the_replicated_rows_pass_through_a_lent_worker(kernel):
    namespace, remote = kernel
    assert verdict(lambda: replication(remote, "read_rows", "write_rows")) == "passed"
    assert verdict(lambda: replication(namespace.get, "read_rows_here", "write_rows")) == "passed"
    assert "raised TypeError: a RelayedWorker" in verdict(
        lambda: replication(remote, "read_rows_here", "write_rows"))


@pytest.mark.timeout(120)
def test_the_servers_traffic_is_counted_on_the_graders_ranks(kernel):
    """Pulling the hot rows fails alike: the bytes are the grader's server ranks'."""
    local = same_verdict(lambda get: replication(get, "read_every_row", "write_rows"), kernel)
    assert "never pulled from or pushed" in local


@pytest.mark.timeout(120)
def test_a_batch_without_hot_rows_and_no_replica_fail_alike(kernel):
    """A worker that skips the allreduce deadlocks the grader's ranks, named in a sentence;
    hot = 0 hands the functions no replica (None crosses as None)."""
    def small(get, write):
        check_replication(get("choose_hot_keys"), get("read_rows"), get(write), servers=2,
                          workers=2, hot=2, batch=4)

    assert "the ranks deadlocked: at clock 1 worker 1's batch holds no hot row" in (
        same_verdict(lambda get: small(get, "write_when_hot"), kernel))
    assert same_verdict(lambda get: small(get, "write_rows"), kernel) == "passed"
    assert same_verdict(lambda get: check_replication(
        get("choose_hot_keys"), get("read_rows"), get("write_rows"), servers=3, workers=3,
        hot=0, steps=4, seed=43), kernel) == "passed"
