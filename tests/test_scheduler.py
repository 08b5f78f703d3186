"""The in-process ranks as cooperative tasks: deterministic, exact about deadlocks, and many."""

import gc
import threading

import numpy as np
import pytest

import minidist as md
from minidist import comm
from minidist.comm import LocalCluster, NetworkModel, allreduce
from minidist.comm.cost import predict
from minidist.comm.errors import RankError
from minidist.comm.transport import scheduler
from minidist.comm.transport.scheduler import YOUNG_OBJECTS_PER_COLLECTION


def serve_in_arrival_order(c):
    """Rank 0 takes whichever request completes first; the others send when their
    modelled work is done. The order rank 0 sees is up to the scheduler."""
    if c.rank == 0:
        pending = {r: c.irecv(np.empty(1), r) for r in range(1, c.size)}
        order = []
        while pending:
            ranks = list(pending)
            k = c.wait_any([pending[r] for r in ranks])
            order.append(ranks[k])
            del pending[ranks[k]]
        return order
    for _ in range(c.rank % 3):
        c.sendrecv(np.ones(1), c.rank, np.empty(1), c.rank)  # busy with itself a while
    c.send(np.full(1, float(c.rank)), 0)
    return None


def test_a_run_is_the_same_every_time():
    orders = [LocalCluster(16).run(serve_in_arrival_order)[0] for _ in range(5)]
    assert sorted(orders[0]) == list(range(1, 16))
    assert all(order == orders[0] for order in orders)


@pytest.mark.timeout(60)
def test_a_deadlock_among_a_thousand_ranks_is_found_exactly_and_names_each_wait():
    def fn(c):  # a chain from rank 700 on, but rank 700 forgets to send
        if c.rank > 700:
            c.recv(np.empty(1), c.rank - 1)
        if 700 < c.rank < c.size - 1:
            c.send(np.ones(1), c.rank + 1)

    with pytest.raises(RankError) as info:
        LocalCluster(1024).run(fn)
    assert info.value.rank == 701
    assert "rank 701: recv from rank 700 tag 0 never matched (rank 700 finished)" \
        in str(info.value)


def test_a_cycle_of_waits_is_a_deadlock_at_once():
    def fn(c):
        c.recv(np.empty(1), (c.rank + 1) % c.size, tag=3)

    with pytest.raises(RankError, match=r"never matched \(deadlock: rank \d+ is blocked in "
                                        r"recv from rank \d+ tag 3\)"):
        LocalCluster(512).run(fn)


def test_a_deadlock_names_what_every_rank_is_blocked_in():
    """Not only the first rank's peers: here the culprit, rank 3 in a barrier, is named
    in the error the caller sees (rank 0's)."""
    def fn(c):
        if c.rank == 3:
            c.barrier()
        else:
            c.recv(np.empty(1), (c.rank + 1) % c.size)

    with pytest.raises(RankError) as info:
        LocalCluster(4).run(fn)
    assert "blocked: rank 0 in recv from rank 1 tag 0; rank 1 in recv from rank 2 tag 0; " \
           "rank 2 in recv from rank 3 tag 0; rank 3 in barrier" in str(info.value)
    with pytest.raises(RankError, match=r"; and 504 more"):  # a long list is cut
        LocalCluster(512).run(lambda c: c.recv(np.empty(1), (c.rank + 1) % c.size))


def test_polling_a_receive_from_a_rank_that_ended_raises_at_once():
    """A loop of test() on a receive no rank can complete any more is reported as a
    blocking receive would be, not left to spin until the timeout."""
    def fn(c):
        if c.rank == 0:
            request = c.irecv(np.empty(1), 1)
            while not request.test():
                pass

    with pytest.raises(RankError, match=r"rank 0: recv from rank 1 tag 0 never matched "
                                        r"\(rank 1 finished\)"):
        LocalCluster(2).run(fn, timeout=30)


@pytest.mark.timeout(60)
def test_after_a_timeout_a_polling_rank_stops_and_the_collector_is_restored():
    """Two ranks polling each other for ever: the run times out, and the ranks' thread
    then stops at its next test() instead of spinning on (and keeping the collector's
    run-time threshold) for the rest of the process."""
    def fn(c):
        request = c.irecv(np.empty(1), 1 - c.rank)
        while not request.test():
            pass

    before = gc.get_threshold()
    with pytest.raises(TimeoutError):
        LocalCluster(2).run(fn, timeout=1)
    runner = next(t for t in threading.enumerate() if t.name == "minidist-ranks")
    runner.join(timeout=10)
    assert not runner.is_alive()
    assert gc.get_threshold() == before


@pytest.mark.timeout(60)
def test_a_run_of_ranks_testing_in_a_loop_times_out_naming_what_each_does():
    """Rank 1 tests for rank 0's message before sending the one rank 0 waits for: no
    deadlock can be decided (a loop may stop after some count: the next test), so the
    timeout ends it; it said "still running: rank 0, rank 1" and no more."""
    def fn(c):
        if c.rank == 0:
            c.recv(np.empty(1), 1)
        else:
            request = c.irecv(np.empty(1), 0)
            while not request.test():
                pass
        c.send(np.ones(1), 1 - c.rank)

    with pytest.raises(TimeoutError) as info:
        LocalCluster(2).run(fn, timeout=2)
    assert "(still running: rank 0 blocked in recv from rank 1 tag 0; rank 1 last tested " \
           "recv from rank 0 tag 0, nothing posted anywhere since)" in str(info.value)


def test_a_rank_that_stops_testing_after_a_count_goes_on():
    """Rank 1 gives up on an optional message after 5 tests and sends rank 0 its answer,
    which rank 0 polls for: a rule deciding 'tested twice, nothing posted' a deadlock
    failed this program, which MPI runs to its end."""
    def fn(c):
        if c.rank == 0:
            answer = c.irecv(np.empty(1), 1)
            while not answer.test():
                pass
            c.send(np.ones(1), 1)
            return "answered"
        optional, tries = c.irecv(np.empty(1), 0), 0
        while not optional.test() and tries < 5:
            tries += 1
        c.send(np.ones(1), 0)
        optional.wait()
        return tries

    assert LocalCluster(2).run(fn, timeout=30) == ["answered", 5]


def test_a_rank_that_tests_once_then_posts_is_no_deadlock():
    def fn(c):
        request = c.irecv(np.empty(1), 1 - c.rank)
        if not request.test():
            c.send(np.ones(1), 1 - c.rank)
        request.wait()
        return True

    assert LocalCluster(2).run(fn, timeout=30) == [True, True]


def test_ranks_of_a_split_are_named_as_the_program_knows_them():
    """World ranks 1 and 3, the split's 0 and 1, wait on each other: the deadlock named
    world rank 1 "rank 1", blocked in a recv "from rank 1" (the split's numbering)."""
    def fn(c):
        sub = c.split(c.rank % 2)
        if c.rank % 2:
            sub.recv(np.empty(1), 1 - sub.rank, tag=7)
        c.barrier()

    with pytest.raises(RankError) as info:
        LocalCluster(4).run(fn, timeout=30)
    said = str(info.value)
    assert "rank 0 (world rank 1) in recv from rank 1 tag 7; rank 2 in barrier; " \
           "rank 1 (world rank 3) in recv from rank 0 tag 7" in said, said


def test_a_rank_polling_test_lets_the_others_run():
    def fn(c):
        if c.rank == 0:
            request = c.irecv(np.empty(1), 1)
            polls = 1
            while not request.test():
                polls += 1
            return polls
        c.compute(1.0)  # modelled only: the poller must yield for this rank to run at all
        c.send(np.ones(1), 0)
        return None

    polls, _ = LocalCluster(2).run(fn)
    assert polls >= 2


def test_each_rank_has_its_own_grad_mode():
    """A rank paused inside no_grad (waiting for a message) must not switch recording off
    for the rank that runs meanwhile."""
    def fn(c):
        x = md.Tensor(np.ones(2), requires_grad=True)
        if c.rank == 0:
            with md.no_grad():
                c.recv(np.empty(1), 1)  # rank 1 runs while rank 0 is in no_grad
                return (x * 2).requires_grad
        recorded = (x * 2).requires_grad
        c.send(np.ones(1), 0)
        return recorded

    assert LocalCluster(2).run(fn) == [False, True]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", ["tree", "double_tree", "recursive_doubling", "naive"])
def test_a_thousand_ranks_reduce_correctly_and_the_clock_equals_the_model(algorithm):
    p, n = 1024, 1500
    network = NetworkModel(alpha=5e-6, beta=1 / 25e9)
    cluster = LocalCluster(p, network=network)
    results = cluster.run(lambda c: allreduce(np.arange(n, dtype=np.int64) * c.rank, c,
                                              algorithm=algorithm, check=False))
    expected = np.arange(n) * (p * (p - 1) // 2)
    assert all(np.array_equal(r, expected) for r in results)
    model = predict(algorithm, p, 8 * n, 8, network)
    assert [s.bytes_sent for s in cluster.stats] == model.bytes_sent
    assert max(s.rounds for s in cluster.stats) == model.rounds
    assert max(s.clock for s in cluster.stats) == pytest.approx(model.time, rel=1e-9)


def test_the_world_outside_a_run_has_no_scheduler_and_still_reports_its_wait():
    c = LocalCluster(1).communicators()[0]
    with pytest.raises(comm.CommError, match=r"rank 0: recv from rank 0 tag 2 never matched "
                                             r"\(deadlock"):
        c.recv(np.empty(1), 0, tag=2)


def test_the_cycle_collector_runs_less_often_during_a_run_and_as_before_after_it():
    before = gc.get_threshold()
    seen = LocalCluster(2).run(lambda c: gc.get_threshold())
    assert seen == [(YOUNG_OBJECTS_PER_COLLECTION, *before[1:])] * 2
    assert gc.get_threshold() == before
    with pytest.raises(RankError):  # restored when a rank fails, too
        LocalCluster(2).run(lambda c: 1 / 0)
    assert gc.get_threshold() == before


def test_overlapping_runs_restore_the_collector_when_the_last_one_ends():
    """Runs that end out of order (one left running by a caller that timed out) leave
    the collector raised until the last ends, and as before after it."""
    before, raised = gc.get_threshold(), (YOUNG_OBJECTS_PER_COLLECTION, *gc.get_threshold()[1:])
    first, second = scheduler._collecting_less_often(), scheduler._collecting_less_often()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold() == raised
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before
