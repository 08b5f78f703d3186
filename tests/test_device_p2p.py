"""Point-to-point messages of device arrays, on both transports: staged through counted host
copies (minidist/comm/transport/device.py), checked with the strict device (CI's guard) and on
a GPU where there is one; and how the MPI transport learns that MPI reads GPU memory itself."""

import sys
from pathlib import Path

import numpy as np
import pytest

import minidist as md
from minidist import backend, comm
from minidist.comm.errors import RankError
from minidist.comm.transport import device
from minidist.comm.transport.device import STAGED

MPIEXEC = Path(sys.executable).parent / "mpiexec"
DEVICES = ["strict"] + (["cuda"] if backend.gpu_available() else [])


@pytest.fixture(autouse=True)
def restore_device():
    before = backend.get_device()
    yield
    backend.set_device(before)


def exchanges(c, on: str):
    """Every point-to-point form with device buffers; returns host copies of what arrived,
    this rank's traffic and the copies it staged."""
    from minidist.comm.transport.device import STAGED  # this process's (not a pickled copy)

    md.set_device(on)  # (the MPI ranks are fresh processes)
    xp = backend.xp()
    right, left = (c.rank + 1) % c.size, (c.rank - 1) % c.size
    c.stats.reset()
    # blocking send and recv of a device vector, round the ring
    got = xp.zeros(4)
    if c.rank % 2 == 0:
        c.send(xp.arange(4.0) + c.rank, right)
        c.recv(got, left)
    else:
        c.recv(got, left)
        c.send(xp.arange(4.0) + c.rank, right)
    # non-blocking, completed by wait_any; and sendrecv from numpy into a device buffer
    into = xp.zeros(3, dtype=xp.int32)
    pending = [c.irecv(into, left, tag=5)]
    sending = c.isend(xp.full(3, c.rank, dtype=xp.int32), right, tag=5)
    assert c.wait_any(pending) == 0
    sending.wait()
    swapped = xp.zeros(2)
    c.sendrecv(np.full(2, float(c.rank)), right, swapped, left, sendtag=6, recvtag=6)
    traffic = (c.stats.messages_sent, c.stats.bytes_sent, c.stats.bytes_recv)
    return ([backend.to_numpy(a) for a in (got, into, swapped)], traffic,
            (STAGED.to_host, STAGED.bytes_to_host, STAGED.to_device, STAGED.bytes_to_device))


def check(results, p, in_process, staging=True):
    for rank, ((got, into, swapped), traffic, staged) in enumerate(results):
        left = (rank - 1) % p
        np.testing.assert_array_equal(got, np.arange(4.0) + left)
        assert into.dtype == np.int32 and list(into) == [left] * 3
        np.testing.assert_array_equal(swapped, [float(left)] * 2)
        assert traffic == (3, 32 + 12 + 16, 32 + 12 + 16)  # as for numpy buffers
        if not in_process:  # each process counts its own copies: 2 sent, 3 received
            assert staged == ((2, 32 + 12, 3, 32 + 12 + 16) if staging else (0, 0, 0, 0))


@pytest.mark.parametrize("on", DEVICES)
@pytest.mark.parametrize("p", [2, 3])
def test_device_messages_in_process(on, p):
    STAGED.reset()
    check(md.launch(exchanges, world_size=p, args=(on,)), p, in_process=True)
    # one process: every rank's copies add up
    assert (STAGED.to_host, STAGED.bytes_to_host, STAGED.to_device, STAGED.bytes_to_device) \
        == (2 * p, 44 * p, 3 * p, 60 * p)


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no {MPIEXEC}")
@pytest.mark.parametrize("on", DEVICES)  # on a GPU: three ranks share it, a context each
def test_device_messages_under_mpi(on):
    results = comm.launch(exchanges, 3, backend="mpi", timeout=60, args=(on,))
    # a CUDA-aware MPI takes GPU arrays as they are: nothing staged
    check(results, 3, in_process=False,
          staging=on != "cuda" or not comm.launch(lambda c: device.mpi_reads_gpu_memory(), 1,
                                                  backend="mpi", timeout=60)[0])


def test_mpi_says_whether_it_reads_gpu_memory(monkeypatch, strict):
    assert device.cuda_among("mpi,system,cuda:device") and device.cuda_among("cuda")
    assert not device.cuda_among("mpi,system") and not device.cuda_among("")
    monkeypatch.setattr(device, "memory_kinds", lambda: "mpi,system")  # MPI stays uninitialised
    monkeypatch.setattr(device, "_loaded_mpi_functions", lambda name: [lambda: 1])
    device.mpi_reads_gpu_memory.cache_clear()
    assert device.mpi_reads_gpu_memory()  # Open MPI's MPIX_Query_cuda_support() said 1
    monkeypatch.setenv("MINIDIST_CUDA_AWARE", "0")
    device.mpi_reads_gpu_memory.cache_clear()
    assert not device.mpi_reads_gpu_memory()  # the user's word wins
    device.mpi_reads_gpu_memory.cache_clear()
    assert not device.direct(np.zeros(3)) and not device.direct(strict.zeros(3))


def test_a_buffer_that_is_no_array_is_named(strict):
    with pytest.raises(RankError, match="C-contiguous numpy or device array.*got list"):
        md.launch(lambda c: c.send([1.0, 2.0], (c.rank + 1) % 2), world_size=2)
