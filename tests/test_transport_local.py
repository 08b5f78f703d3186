"""The in-process transport: MPI's semantics, exact counters and clocks, errors instead of hangs."""

import json
import math
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidist import comm
from minidist.comm import CommError, LocalCluster, NetworkModel, RankError, Straggler, run_local
from minidist.comm.ops import apply_op, check_reducible

# Powers of two, so every modelled time below is exact in floating point.
NET = NetworkModel(alpha=1.0, beta=2.0**-10, gamma=2.0**-12)
N = 256  # float64 elements per message in the timing tests
M = NET.message_time(N * 8)  # seconds per message of N float64: 1 + 2048/1024 = 3


def run(fn, world_size, **options):
    options.setdefault("network", NET)
    cluster = LocalCluster(world_size, **options)
    return cluster.run(fn, timeout=20), cluster.stats


# --- reduction operators -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("op, reference", [("sum", np.add), ("max", np.maximum),
                                           ("min", np.minimum), ("prod", np.multiply)])
def test_apply_op_matches_numpy_in_place(dtype, op, reference):
    rng = np.random.default_rng(0)
    acc, incoming = (rng.integers(-5, 6, 17).astype(dtype) for _ in range(2))
    expected = reference(acc, incoming)
    acc_id = id(acc)
    apply_op(op, acc, incoming)
    assert id(acc) == acc_id and acc.dtype == dtype
    np.testing.assert_array_equal(acc, expected)


@pytest.mark.parametrize("arr, op, words", [
    (np.zeros(3, bool), "sum", "bool"),
    (np.zeros(3, object), "sum", "object"),
    (np.zeros(3, complex), "max", "complex128"),
    (np.zeros(3), "mean", "unknown reduction op 'mean'"),
])
def test_unsupported_reductions_are_named(arr, op, words):
    with pytest.raises((TypeError, ValueError), match=words):
        check_reducible(arr, op)


def test_complex_sum_is_allowed_and_shapes_must_agree():
    acc = np.array([1 + 1j, 2])
    apply_op("sum", acc, np.array([1j, 1 + 0j]))
    np.testing.assert_array_equal(acc, [1 + 2j, 3])
    with pytest.raises(ValueError, match="cannot combine"):
        apply_op("sum", np.zeros(3), np.zeros(4))


# --- point-to-point semantics -------------------------------------------------------------

def test_send_recv_and_tags_match_out_of_order():
    def fn(c):
        if c.rank == 0:
            c.send(np.array([1.0, 1.0]), 1, tag=1)
            c.send(np.array([2.0, 2.0]), 1, tag=2)
            c.send(np.array([3.0, 3.0]), 1, tag=1)  # same tag: arrives after the first
            return None
        got = [c.recv(np.empty(2), 0, tag=t).copy() for t in (2, 1, 1)]
        return [g[0] for g in got]

    results, _ = run(fn, 2)
    assert results[1] == [2.0, 1.0, 3.0]


def test_irecvs_match_in_the_order_they_were_posted():
    def fn(c):
        if c.rank == 1:
            for value in (10, 20, 30):
                c.isend(np.array([value], np.int64), 0, tag=5).wait()
            return None
        bufs = [np.zeros(1, np.int64) for _ in range(3)]
        requests = [c.irecv(b, 1, tag=5) for b in bufs]
        for request in reversed(requests):  # completing them backwards changes nothing
            request.wait()
        assert all(r.test() for r in requests)
        return [int(b[0]) for b in bufs]

    assert run(fn, 2)[0][0] == [10, 20, 30]


@pytest.mark.parametrize("world_size", range(1, 9))
def test_sendrecv_ring_does_not_deadlock(world_size):
    def fn(c):
        right, left = (c.rank + 1) % c.size, (c.rank - 1) % c.size
        got = np.empty(3, np.int32)
        c.sendrecv(np.full(3, c.rank, np.int32), right, got, left, sendtag=4, recvtag=4)
        return int(got[0])

    results, _ = run(fn, world_size)
    assert results == [(r - 1) % world_size for r in range(world_size)]


def test_the_fabric_keeps_no_empty_queue_once_every_message_is_received():
    """Queues by address exist only while they hold something: a run that leaves a
    million addresses with one message each does not keep a million empty queues."""
    def fn(c):
        early = [c.isend(np.full(2, c.rank), peer, tag=5) for peer in range(c.size)]
        got = [c.recv(np.empty(2, np.int64), peer, tag=5)[0] for peer in range(c.size)]
        for request in early:
            request.wait()
        c.sendrecv(np.ones(1), (c.rank + 1) % c.size, np.empty(1), (c.rank - 1) % c.size)
        c.barrier()
        return got, len(c.fabric.mailboxes), len(c.fabric.posted)

    results, _ = run(fn, 5)
    assert results == [(list(range(5)), 0, 0)] * 5


def test_a_receive_buffer_must_fit_the_message():
    def fn(c):
        if c.rank == 0:
            c.send(np.zeros(4, np.float32), 1)
        else:
            c.recv(np.zeros(4, np.float64), 0)

    with pytest.raises(RankError, match=r"message is 4 x float32, buffer is 4 x float64"):
        run(fn, 2)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_irecv_upto_takes_a_shorter_message_and_counts_what_came(world_size):
    def fn(c):
        right, left = (c.rank + 1) % c.size, (c.rank - 1) % c.size
        bufs = [np.full(6, -1, np.int32) for _ in range(2)]
        receives = [c.irecv_upto(buf, left, tag) for buf, tag in zip(bufs, (4, 5), strict=True)]
        for tag, n in ((4, c.rank + 1), (5, 6)):  # a shorter message, then an exact fit
            c.send(np.arange(n, dtype=np.int32), right, tag)
        first = c.wait_any(receives[:1])
        receives[1].wait()
        return first, [r.received for r in receives], [b.tolist() for b in bufs]

    results, stats = run(fn, world_size)
    for rank, (first, received, bufs) in enumerate(results):
        n = (rank - 1) % world_size + 1
        assert first == 0 and received == [4 * n, 24]
        assert bufs == [list(range(n)) + [-1] * (6 - n), list(range(6))]
        assert (stats[rank].messages_recv, stats[rank].bytes_recv) == (2, 4 * n + 24)

    def too_long(c):
        if c.rank == 0:
            c.send(np.zeros(7, np.int32), 1)
        else:
            c.irecv_upto(np.zeros(6, np.int32), 0).wait()

    with pytest.raises(RankError, match=r"message is 7 x int32, buffer is at most 6 x int32"):
        run(too_long, 2)


def test_bad_arguments_are_named():
    with pytest.raises(RankError, match=r"send with rank 3, but the communicator has ranks 0..1"):
        run(lambda c: c.send(np.zeros(1), 3), 2)
    with pytest.raises(RankError, match="C-contiguous"):
        run(lambda c: c.send(np.zeros((4, 4))[:, 0], (c.rank + 1) % 2), 2)
    # a peer that is no integer, though within 0..P-1 (it once crashed the transport's
    # thread, and the run returned None for the rank that called it)
    with pytest.raises(RankError, match=r"recv with rank 0.5, but the communicator has ranks"):
        run(lambda c: c.recv(np.zeros(1), 0.5) if c.rank else c.send(np.ones(1), 1), 2)


def test_a_failure_of_the_transport_itself_is_raised_not_returned(monkeypatch):
    from minidist.comm.transport.fabric import Fabric

    def broken(self):
        raise KeyError("a bookkeeping bug")

    monkeypatch.setattr(Fabric, "settle", broken)  # called once every rank waits
    with pytest.raises(RuntimeError, match="(?s)in-process transport failed .*a bookkeeping bug"):
        run(lambda c: c.recv(np.zeros(1), 1 - c.rank), 2)


@settings(max_examples=15, deadline=None)
@given(world_size=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_random_all_to_all_traffic_arrives_intact(world_size, seed):
    """Every rank sends every other rank messages of random lengths and tags, posting
    its receives in a different random order; all data arrives where it should."""
    rng = np.random.default_rng(seed)
    plan = {(s, d, k): (int(rng.integers(0, 4)), int(rng.integers(0, 9)))
            for s in range(world_size) for d in range(world_size) for k in range(2)}

    def fn(c):
        sends = [c.isend(np.full(n, 100 * s + 10 * d + k, np.int64), d, tag=t * 2 + k)
                 for (s, d, k), (t, n) in plan.items() if s == c.rank]
        mine = [(key, val) for key, val in plan.items() if key[1] == c.rank]
        order = np.random.default_rng(seed + c.rank).permutation(len(mine))
        got = {}
        for i in order:
            (s, d, k), (t, n) = mine[i]
            got[(s, d, k)] = c.recv(np.empty(n, np.int64), s, tag=t * 2 + k)
        for request in sends:
            request.wait()
        return got

    for got in run(fn, world_size)[0]:
        for (s, d, k), buf in got.items():
            assert buf.tolist() == [100 * s + 10 * d + k] * plan[(s, d, k)][1]


# --- collective building blocks -------------------------------------------------------------

def test_barrier_gives_everyone_the_latest_clock_and_rounds():
    def fn(c):
        c.compute(float(c.rank))
        c.barrier()
        return c.stats.clock

    results, stats = run(fn, 4)
    assert results == [3.0] * 4 and all(s.messages_sent == 0 for s in stats)


def test_split_groups_by_color_orders_by_key_and_shares_counters():
    def fn(c):
        sub = c.split(color=c.rank % 2, key=-c.rank)  # reversed order inside each color
        got = np.empty(1, np.int64)
        sub.sendrecv(np.array([c.rank]), (sub.rank + 1) % sub.size, got,
                     (sub.rank - 1) % sub.size)
        return sub.rank, sub.size, int(got[0]), c.stats.messages_sent

    results, _ = run(fn, 5)
    # color 0: world ranks 4, 2, 0 become 0, 1, 2; color 1: ranks 3, 1 become 0, 1
    assert [r[:2] for r in results] == [(2, 3), (1, 2), (1, 3), (0, 2), (0, 3)]
    assert [r[2] for r in results] == [2, 3, 4, 1, 0]
    assert [r[3] for r in results] == [1] * 5  # counted on the rank, not the sub-communicator


def messages_on_a_duplicate_never_match_the_original(c):
    """Rank 0 sends 1.0 on the private duplicate, then 2.0 on c, both with tag 0;
    rank 1 receives on c first and must get 2.0. Returns (what c got, what the
    duplicate got, the duplicate is kept, it shares the counters)."""
    private = c.private()
    if c.rank == 0:
        sending = [private.isend(np.ones(1), 1), c.isend(np.full(1, 2.0), 1)]
        for request in sending:
            request.wait()
        return None
    if c.rank == 1:
        on_c, on_private = np.empty(1), np.empty(1)
        c.recv(on_c, 0)
        private.recv(on_private, 0)
        return float(on_c[0]), float(on_private[0]), private is c.private(), \
            private.stats is c.stats
    return None


def test_a_duplicate_is_a_context_of_its_own_sharing_the_counters():
    results, stats = run(messages_on_a_duplicate_never_match_the_original, 3)
    assert results[1] == (2.0, 1.0, True, True)
    assert stats[0].messages_sent == 2 and stats[1].messages_recv == 2


# --- counters, rounds and the clock, exactly as documented ----------------------------------

def test_one_message_costs_alpha_plus_beta_n_on_both_sides():
    def fn(c):
        if c.rank == 0:
            c.send(np.ones(N), 1, tag=3)
        else:
            c.recv(np.empty(N), 0, tag=3)

    _, stats = run(fn, 2)
    assert (stats[0].messages_sent, stats[0].bytes_sent, stats[0].clock) == (1, N * 8, M)
    assert (stats[1].messages_recv, stats[1].bytes_recv, stats[1].clock) == (1, N * 8, M)
    assert (stats[0].rounds, stats[1].rounds) == (1, 1)  # one latency on each side


@pytest.mark.parametrize("world_size", [2, 3, 5, 8])
def test_chain_fan_in_and_fan_out_follow_the_rules(world_size):
    def chain(c):  # rank r waits for r-1, then passes on: P-1 dependent messages
        buf = np.ones(N)
        if c.rank > 0:
            c.recv(buf, c.rank - 1)
        if c.rank < c.size - 1:
            c.send(buf, c.rank + 1)

    def fan_in(c):  # everyone sends to rank 0 at time 0: rank 0's link serialises them
        if c.rank == 0:
            for source in range(1, c.size):
                c.recv(np.empty(N), source)
        else:
            c.send(np.ones(N), 0)

    def fan_out(c):  # rank 0 posts every send at once: its link serialises them too
        if c.rank == 0:
            for request in [c.isend(np.ones(N), d) for d in range(1, c.size)]:
                request.wait()
        else:
            c.recv(np.empty(N), 0)

    p = world_size
    _, stats = run(chain, p)  # rank k is done after k+1 messages, the last after p-1
    assert [s.clock for s in stats] == [min(k + 1, p - 1) * M for k in range(p)]
    assert [s.rounds for s in stats] == [min(k + 1, p - 1) for k in range(p)]
    _, stats = run(fan_in, p)
    assert (stats[0].clock, stats[0].rounds, stats[0].bytes_recv) == ((p - 1) * M, p - 1,
                                                                      (p - 1) * N * 8)
    _, stats = run(fan_out, p)
    assert [s.clock for s in stats] == [(p - 1) * M] + [d * M for d in range(1, p)]
    assert [s.rounds for s in stats] == [p - 1] + list(range(1, p))


@pytest.mark.parametrize("world_size", [2, 3, 4, 7, 8])
def test_binomial_broadcast_takes_ceil_log2_p_rounds(world_size):
    def broadcast(c):
        buf = np.ones(N) if c.rank == 0 else np.empty(N)
        mask = 1
        while mask < c.size:  # find the round in which this rank receives
            if c.rank & mask:
                c.recv(buf, c.rank - mask)
                break
            mask <<= 1
        mask >>= 1
        while mask > 0:  # then pass it on to ranks further away
            if c.rank + mask < c.size:
                c.send(buf, c.rank + mask)
            mask >>= 1

    _, stats = run(broadcast, world_size)
    depth = math.ceil(math.log2(world_size))
    assert max(s.rounds for s in stats) == depth
    assert max(s.clock for s in stats) == depth * M
    assert sum(s.messages_sent for s in stats) == world_size - 1


@pytest.mark.parametrize("world_size", [2, 3, 4, 6])
def test_ring_allreduce_counts_2p_minus_1_rounds_and_its_bytes(world_size):
    """A hand-written ring allreduce (reduce-scatter, allgather) on P·N elements."""
    def ring(c):
        p, right, left = c.size, (c.rank + 1) % c.size, (c.rank - 1) % c.size
        data = np.arange(p * N, dtype=np.float64) * (c.rank + 1)
        chunks, incoming = np.split(data, p), np.empty(N)
        for step in range(p - 1):  # reduce-scatter
            c.sendrecv(chunks[(c.rank - step) % p], right, incoming, left)
            c.combine("sum", chunks[(c.rank - step - 1) % p], incoming)
        for step in range(p - 1):  # allgather
            c.sendrecv(chunks[(c.rank + 1 - step) % p], right, chunks[(c.rank - step) % p], left)
        return data

    p = world_size
    results, stats = run(ring, p)
    expected = np.arange(p * N, dtype=np.float64) * p * (p + 1) / 2
    for result in results:
        np.testing.assert_array_equal(result, expected)
    for s in stats:
        assert (s.rounds, s.messages_sent, s.bytes_sent) == (2 * (p - 1), 2 * (p - 1),
                                                             2 * (p - 1) * N * 8)
        assert s.clock == 2 * (p - 1) * M + (p - 1) * NET.reduce_time(N * 8)


def test_reset_zeroes_counters_and_clock():
    def fn(c):
        c.sendrecv(np.ones(4), (c.rank + 1) % 2, np.empty(4), (c.rank + 1) % 2)
        before = c.stats.copy()
        c.stats.reset()
        return before, c.stats.copy()

    for before, after in run(fn, 2)[0]:
        assert before.messages_sent == 1 and before.clock > 0
        assert (after.messages_sent, after.bytes_recv, after.rounds, after.clock) == (0, 0, 0, 0)


# --- stragglers and failures ------------------------------------------------------------------

def test_a_straggler_delays_its_messages_and_its_compute():
    def fn(c):
        c.compute(1.0)
        c.sendrecv(np.ones(N), (c.rank + 1) % c.size, np.empty(N), (c.rank - 1) % c.size)
        return c.stats.clock

    on_time, _ = run(fn, 3)
    late, _ = run(fn, 3, stragglers={1: Straggler(delay=5.0, slowdown=2.0)})
    assert on_time == [1.0 + M] * 3
    # rank 1 computes 2 s, then waits 5 s before sending: rank 2 receives at 7 + M;
    # rank 1's own send ends at 7 + M; rank 0's message to rank 1 is not late.
    assert late == [1.0 + M, 7.0 + M, 7.0 + M]


def test_a_sleeping_straggler_really_sleeps_what_it_adds_to_its_clock(monkeypatch):
    """sleep=True: the extra goes to time.sleep too (the calls are recorded, not timed)."""
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)

    def fn(c):
        c.compute(0.5)
        if c.rank:
            c.send(np.ones(1), 0)
        else:
            c.recv(np.empty(1), 1)
        return c.stats.clock

    clocks, _ = run(fn, 2, stragglers={1: Straggler(delay=0.25, slowdown=2.0, sleep=True)})
    assert slept == [0.5, 0.25]  # compute's extra (2 - 1) x 0.5 s, then the delay of its send
    assert clocks[1] == 1.0 + 0.25 + NET.message_time(8)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("fail_after", [0, 2])
def test_a_failed_rank_gives_its_peers_errors_not_a_hang(fail_after):
    def ring_steps(c):
        for _ in range(3):
            c.sendrecv(np.ones(2), (c.rank + 1) % c.size, np.empty(2), (c.rank - 1) % c.size)

    # the peers learn of the failure as soon as nobody can run, not after a timeout
    with pytest.raises(RankError, match=r"rank 2 raised RankFailure") as info:
        run(ring_steps, 4, failures={2: fail_after})
    assert info.value.rank == 2 and "injected failure" in str(info.value)


def test_a_rank_exception_is_reraised_with_rank_and_traceback():
    def fn(c):
        if c.rank == 3:
            raise ZeroDivisionError("rank three divides by zero")
        c.recv(np.empty(1), 3)

    with pytest.raises(RankError, match="rank 3 raised ZeroDivisionError") as info:
        run(fn, 4)
    assert "in fn" in info.value.traceback_text
    assert isinstance(info.value.__cause__, ZeroDivisionError)


# --- receives that can never match ---------------------------------------------------------

@pytest.mark.timeout(20)
def test_unmatched_recv_names_rank_peer_and_tag():
    def fn(c):
        if c.rank == 2:
            c.recv(np.empty(1), 1, tag=7)

    with pytest.raises(RankError, match=r"rank 2: recv from rank 1 tag 7 never matched "
                                        r"\(rank 1 finished\)"):
        run(fn, 3)


@pytest.mark.timeout(20)
def test_deadlock_is_found_at_once_and_explained():
    def fn(c):  # 2 waits for 1, 1 waits for 0, 0 waits for 2: nobody ever sends
        c.recv(np.empty(1), (c.rank - 1) % c.size, tag=7)

    with pytest.raises(RankError) as info:
        run(fn, 3)
    rank = info.value.rank
    assert f"rank {rank}: recv from rank {(rank - 1) % 3} tag 7 never matched (deadlock: " \
           f"rank {(rank - 1) % 3} is blocked in recv from rank {(rank - 2) % 3} tag 7)" \
           in str(info.value)


@pytest.mark.timeout(20)
def test_sends_above_the_eager_limit_deadlock_like_mpi():
    def send_first(c):
        other = 1 - c.rank
        c.send(np.ones(100), other)
        return c.recv(np.empty(100), other)[0]

    assert run(send_first, 2)[0] == [1.0, 1.0]  # buffered: fine
    with pytest.raises(RankError, match=r"send to rank \d tag 0 never matched \(deadlock"):
        run(send_first, 2, eager_limit=64)


def test_a_rendezvous_send_waits_for_its_receive_on_the_clock_too():
    """Rank 1 computes 10 s, then receives 100 B (m = 1 + 0.01 * 100 = 2 s): a send above
    the eager limit blocked until then, but its clock said 2 s, an eager send's."""
    network = NetworkModel(alpha=1.0, beta=0.01, gamma=0.0)

    def fn(c):
        if c.rank == 0:
            c.send(np.ones(100, np.uint8), 1)
        else:
            c.compute(10.0)
            c.recv(np.empty(100, np.uint8), 0)
        return c.stats.clock, c.stats.rounds

    assert LocalCluster(2, network=network).run(fn) == [(2.0, 1), (12.0, 1)]
    assert LocalCluster(2, network=network, eager_limit=10).run(fn) == [(12.0, 1), (12.0, 1)]

    def two_sends(c):  # rank 0 isends to 1 and 2, who compute 3 s before receiving
        if c.rank == 0:
            for request in [c.isend(np.ones(100, np.uint8), dest) for dest in (1, 2)]:
                request.wait()
        else:
            c.compute(3.0)
            c.recv(np.empty(100, np.uint8), 0)
        return c.stats.clock

    # both transfers once took rank 0's one link during [3, 5]: now one after the other
    assert LocalCluster(3, network=network, eager_limit=10).run(two_sends) == [7.0, 5.0, 7.0]


@pytest.mark.parametrize("seconds", [-5.0, float("nan"), float("inf")])
def test_compute_refuses_time_that_would_break_the_clock(seconds):
    """The clock ran backwards (-5) or became NaN or infinite, without a word; a 0-d
    array's seconds (a reduction's result) are seconds."""
    with pytest.raises(RankError, match="compute's seconds must be a finite number >= 0"):
        LocalCluster(2, network=NET).run(lambda c: c.compute(seconds))
    assert LocalCluster(1, network=NET).run(
        lambda c: (c.compute(np.array(0.5)), c.stats.clock)[1]) == [0.5]


def test_a_run_that_outlives_its_timeout_raises():
    released = threading.Event()  # the ranks run until the caller has given up on them
    with pytest.raises(TimeoutError, match="within 0.2 s"):
        LocalCluster(2, network=NET).run(lambda c: released.wait(60), timeout=0.2)
    released.set()


# --- world of one, trace, network model file -----------------------------------------------------

def test_world_outside_mpi_is_one_in_process_rank():
    c = comm.world()
    assert (c.rank, c.size) == (0, 1) and c is comm.world()
    c.send(np.arange(3.0), 0, tag=9)  # a buffered send to oneself, as in MPI
    np.testing.assert_array_equal(c.recv(np.empty(3), 0, tag=9), [0.0, 1.0, 2.0])
    with pytest.raises(CommError, match="rank 0: recv from rank 0 tag 1 never matched"):
        c.recv(np.empty(3), 0, tag=1)


def test_trace_prints_one_line_per_message(monkeypatch, capsys):
    monkeypatch.setenv("MINIDIST_TRACE", "1")
    run(lambda c: c.sendrecv(np.ones(3), (c.rank + 1) % 3, np.empty(3), (c.rank - 1) % 3,
                             sendtag=5, recvtag=5), 3)
    lines = sorted(capsys.readouterr().err.splitlines())
    assert lines == [f"rank {r} -> {(r + 1) % 3} | tag 5 | 24 bytes" for r in range(3)]


def test_network_model_is_loaded_from_the_fit_file(tmp_path, monkeypatch):
    path = tmp_path / "network.json"
    monkeypatch.setenv("MINIDIST_NETWORK", str(path))
    assert comm.load_network_model() == NetworkModel()  # no file: the defaults
    comm.save_network_model(NetworkModel(2e-6, 3e-10, 4e-11), host="here")
    assert json.loads(path.read_text())["host"] == "here"
    # the in-process transport and the cost model never read it unasked: a notebook's
    # clocks are the same on every machine
    assert LocalCluster(2).network == NetworkModel()
    assert comm.cost.predict("ring", 4, 1 << 20).time == comm.cost.predict(
        "ring", 4, 1 << 20, network=NetworkModel()).time
    curved = NetworkModel(2e-6, 3e-10, 4e-11, curve=((4096, 1e-10, 2e-11), (1 << 20, 3e-10,
                                                                            5e-11)))
    comm.save_network_model(curved)
    assert comm.load_network_model() == curved  # the curve survives the JSON round trip
    path.write_text("{}")
    with pytest.raises(ValueError, match="not a network model"):
        comm.load_network_model()


def test_run_local_passes_arguments_and_returns_results_in_rank_order():
    assert run_local(lambda c, a, b: (c.rank, a + b), 4, args=(1, 2)) == [
        (r, 3) for r in range(4)]
