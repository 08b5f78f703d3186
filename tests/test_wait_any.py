"""wait_any (MPI_Waitany) on both transports, and the in-process peek.

A server posts one receive per client and answers whoever speaks first;
here rank 0 is the server and the others speak in an order rank 0 cannot
guess, each sending three messages.
"""

import numpy as np
import pytest

from minidist import comm
from minidist.comm import LocalCluster, RankError

MESSAGES = 3


def serve_whoever_speaks(c):
    """Rank 0 answers every message of every other rank, in the order they come."""
    if c.rank:
        for k in range(MESSAGES):
            c.send(np.array([c.rank, k], np.int64), 0, tag=5)
        return None
    buffers = {r: np.empty(2, np.int64) for r in range(1, c.size)}
    pending = {r: c.irecv(buffers[r], r, tag=5) for r in range(1, c.size)}
    left = {r: MESSAGES for r in range(1, c.size)}
    heard = []
    while pending:
        ranks = list(pending)
        source = ranks[c.wait_any([pending[r] for r in ranks])]
        pending[source].wait()  # already complete: returns at once
        heard.append(tuple(int(v) for v in buffers[source]))
        left[source] -= 1
        del pending[source]
        if left[source]:
            pending[source] = c.irecv(buffers[source], source, tag=5)
    return heard


def check_heard(heard, size):
    assert sorted(heard) == [(r, k) for r in range(1, size) for k in range(MESSAGES)]
    for r in range(1, size):  # one sender's messages in the order it sent them
        assert [k for source, k in heard if source == r] == list(range(MESSAGES))


@pytest.mark.parametrize("size", [2, 3, 5])
def test_wait_any_in_process(size):
    check_heard(LocalCluster(size).run(serve_whoever_speaks)[0], size)


@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_wait_any_under_mpi():
    check_heard(comm.launch(serve_whoever_speaks, 3, backend="mpi", timeout=45)[0], 3)


def test_wait_any_returns_a_receive_whose_sender_ended_and_its_wait_raises():
    def body(c):
        if c.rank == 0:
            requests = [c.irecv(np.empty(1), 1)]
            assert c.wait_any(requests) == 0  # rank 1 ended: the receive can never complete
            requests[0].wait()
        return None  # rank 1 ends without sending

    with pytest.raises(RankError, match="recv from rank 1 tag 0 never matched"):
        LocalCluster(2).run(body)


def test_wait_any_needs_a_request_and_peek_a_receive():
    def body(c):
        with pytest.raises(ValueError, match="at least one request"):
            c.wait_any([])
        if c.rank == 0:
            with pytest.raises(TypeError, match="receive request"):
                c.peek(c.isend(np.zeros(1), 1))
            return None
        request = c.irecv(np.empty(1), 0)
        request.wait()
        return True

    assert LocalCluster(2).run(body)[1]


def test_peek_reads_a_message_without_receiving_it_or_moving_the_clock():
    def body(c):
        if c.rank == 1:
            c.compute(1.0)  # sends at modelled time 1 s
            c.send(np.arange(3.0), 0)
            return None
        request = c.irecv(np.empty(3), 1)
        data = c.peek(request)
        before = (c.stats.clock, c.stats.messages_recv)
        assert not data.flags.writeable
        request.wait()
        return data.tolist(), before, c.stats.clock

    data, (clock_before, received_before), clock_after = LocalCluster(2).run(body)[0]
    assert data == [0.0, 1.0, 2.0]
    assert (clock_before, received_before) == (0.0, 0)
    assert clock_after > 1.0
