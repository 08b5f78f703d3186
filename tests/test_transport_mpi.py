"""The MPI transport under a real mpiexec: same semantics and counters as the in-process one.

Each launch runs many checks at once (starting MPI costs ~0.5 s), and the
checks return what they saw; the assertions are made here, in the parent.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_transport_local import messages_on_a_duplicate_never_match_the_original

from minidist import comm
from minidist.util.mpiexec import rank_environment

MPIEXEC = Path(sys.executable).parent / "mpiexec"
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")]


def transport_checks(c):
    """Point-to-point, tags, non-blocking, sendrecv ring, barrier, split and counters."""
    from mpi4py import MPI

    from minidist.comm.transport.mpi import MPICommunicator

    seen = {"type": type(c).__name__, "rank": c.rank, "size": c.size,
            "is_world": MPI.Comm.Compare(c.mpi_comm, MPI.COMM_WORLD) == MPI.IDENT}
    assert isinstance(c, MPICommunicator)
    right, left = (c.rank + 1) % c.size, (c.rank - 1) % c.size

    # tags: three messages to the right, received in the order tag 2, tag 1, tag 1
    c.stats.reset()
    sends = [c.isend(np.full(2, 10 * c.rank + k, np.int64), right, tag=t)
             for k, t in enumerate((1, 2, 1))]
    got = [c.recv(np.empty(2, np.int64), left, tag=t)[0] for t in (2, 1, 1)]
    for request in sends:
        request.wait()
    seen["tags"] = [int(g) - 10 * left for g in got]
    seen["tag_stats"] = c.stats.copy()

    # sendrecv around the ring, float32
    c.stats.reset()
    ring = c.sendrecv(np.full(5, c.rank, np.float32), right, np.empty(5, np.float32), left,
                      sendtag=3, recvtag=3)
    seen["ring"] = ring.tolist()
    seen["ring_stats"] = c.stats.copy()

    # irecv posted before the matching isend; test() polls until done
    c.stats.reset()
    buf = np.zeros(1000)
    receive = c.irecv(buf, left, tag=9)
    c.barrier()
    c.isend(np.arange(1000.0) + c.rank, right, tag=9).wait()
    while not receive.test():
        pass
    seen["irecv_ok"] = bool(np.array_equal(buf, np.arange(1000.0) + left))
    seen["irecv_stats"] = c.stats.copy()

    # irecv_upto: a shorter message fills the first items, counted by what came, through
    # wait_any and wait alike
    c.stats.reset()
    bufs = [np.full(6, -1, np.int32) for _ in range(2)]
    receives = [c.irecv_upto(b, left, tag=t) for b, t in zip(bufs, (4, 5), strict=True)]
    for tag, n in ((4, c.rank + 1), (5, 6)):
        c.send(np.arange(n, dtype=np.int32), right, tag)
    seen["upto"] = (c.wait_any(receives[:1]), receives[1].wait(),
                    [r.received for r in receives], [b.tolist() for b in bufs])
    seen["upto_stats"] = c.stats.copy()

    # split: even and odd ranks, reversed by key; counters are shared with the parent
    sub = c.split(c.rank % 2, key=-c.rank)
    seen["sub"] = (sub.rank, sub.size, sub.stats is c.stats)
    total = np.array([c.rank], np.int64)
    sub.mpi_comm.Allreduce(MPI.IN_PLACE, total)
    seen["sub_total"] = int(total[0])

    # a duplicate is a context of its own (the library's collectives send on one)
    if c.size > 1:
        seen["dup"] = messages_on_a_duplicate_never_match_the_original(c)

    # a strided view is refused before MPI sees it
    try:
        c.send(np.zeros((4, 4))[:, 0], right)
        seen["strided"] = "accepted"
    except ValueError as err:
        seen["strided"] = str(err)
    return seen


@pytest.mark.timeout(60)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_mpi_transport_semantics_and_counters(world_size):
    results = comm.launch(transport_checks, world_size, backend="mpi", timeout=45)
    p = world_size
    for rank, seen in enumerate(results):
        left = (rank - 1) % p
        assert (seen["type"], seen["rank"], seen["size"], seen["is_world"]) == (
            "MPICommunicator", rank, p, True)
        assert seen["tags"] == [1, 0, 2]  # tag 2 first, then the two tag-1 messages in order
        tag_stats = seen["tag_stats"]
        assert (tag_stats.messages_sent, tag_stats.bytes_sent) == (3, 3 * 16)
        assert (tag_stats.messages_recv, tag_stats.bytes_recv) == (3, 3 * 16)
        assert seen["ring"] == [float(left)] * 5
        assert (seen["ring_stats"].messages_sent, seen["ring_stats"].bytes_recv) == (1, 20)
        assert seen["irecv_ok"]
        assert (seen["irecv_stats"].bytes_sent, seen["irecv_stats"].bytes_recv) == (8000, 8000)
        n = left + 1
        assert seen["upto"] == (0, None, [4 * n, 24],
                                [list(range(n)) + [-1] * (6 - n), list(range(6))])
        assert (seen["upto_stats"].messages_recv, seen["upto_stats"].bytes_recv) == (2,
                                                                                    4 * n + 24)
        same_color = [r for r in range(p) if r % 2 == rank % 2]
        assert seen["sub"] == (sorted(same_color, reverse=True).index(rank), len(same_color),
                               True)
        assert seen["sub_total"] == sum(same_color)
        assert "C-contiguous" in seen["strided"]
        if p > 1 and rank == 1:
            assert seen["dup"] == (2.0, 1.0, True, True)


def _trace_pair(c):
    c.sendrecv(np.zeros(3), (c.rank + 1) % 2, np.empty(3), (c.rank + 1) % 2, sendtag=6,
               recvtag=6)


@pytest.mark.timeout(60)
def test_trace_lines_under_mpi(monkeypatch, capsys):
    monkeypatch.setenv("MINIDIST_TRACE", "1")
    comm.launch(_trace_pair, 2, backend="mpi", timeout=45)
    lines = sorted(line for line in capsys.readouterr().err.splitlines()
                   if line.startswith("rank "))
    assert lines == ["rank 0 -> 1 | tag 6 | 24 bytes", "rank 1 -> 0 | tag 6 | 24 bytes"]


@pytest.mark.timeout(60)
def test_world_is_mpi_under_mpiexec_and_local_otherwise():
    script = ("import sys; from minidist import comm; c = comm.world(); "  # one write per line
              "sys.stdout.write(f'{type(c).__name__} {c.rank} {c.size}\\n')")
    env = rank_environment(2)
    under_mpi = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpi4py", "-c",
                                script], capture_output=True, text=True, timeout=45, env=env)
    assert sorted(under_mpi.stdout.split("\n")[:2]) == ["MPICommunicator 0 2",
                                                        "MPICommunicator 1 2"]
    alone = subprocess.run([sys.executable, "-c", script + "; print('mpi4py.MPI' in sys.modules)"],
                           capture_output=True, text=True, timeout=45, env=env)
    assert alone.stdout.split() == ["LocalCommunicator", "0", "1", "False"]  # MPI not loaded


def _receives_of_the_wrong_length(c):
    """Rank 0 sends 3 float64 five times; rank 1 receives each into a buffer of another
    length, by recv, sendrecv, irecv + wait, irecv + test, and into a shorter one."""
    if c.rank == 0:
        for _ in range(4):
            c.send(np.arange(3.0), 1)
        c.sendrecv(np.arange(3.0), 1, np.empty(0), 1)
        return None
    seen = []
    for receive in (lambda b: c.recv(b, 0), lambda b: c.irecv(b, 0).wait(),
                    lambda b: _tested(c.irecv(b, 0)), lambda b: c.recv(np.empty(2), 0),
                    lambda b: c.sendrecv(np.empty(0), 0, b, 0)):
        try:
            receive(np.full(5, -1.0))
            seen.append("no error")
        except ValueError as err:
            seen.append(str(err))
    return seen


def _tested(request):
    while not request.test():
        pass


@pytest.mark.timeout(60)
def test_a_message_that_does_not_fill_its_buffer_is_an_error_as_in_process():
    """MPI left the rest of a longer buffer as it was, silently: [0, 1, 2, -1, -1]."""
    seen = comm.launch(_receives_of_the_wrong_length, 2, backend="mpi", timeout=45)[1]
    shorter = "rank 1: recv from rank 0 tag 0: message is 24 bytes, buffer is 40 (5 x float64)"
    assert seen[:3] == [shorter] * 3 and seen[4] == shorter
    assert seen[3] == ("rank 1: recv from rank 0 tag 0: message is longer than the buffer's "
                       "16 bytes (2 x float64)")
