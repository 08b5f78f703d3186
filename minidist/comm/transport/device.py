"""Device arrays through point-to-point messages: staged through counted host copies.

(Under an MPI library that reads GPU memory itself, GPU arrays go to MPI as they
are instead: ``direct``, at the end.)

Both transports move host memory (mpi4py's buffer methods, the in-process
copies). A ``send`` / ``isend`` of a device array (cupy's, or the strict CI
guard's) therefore copies it into a host buffer first and sends that; a
``recv`` / ``irecv`` into a device array receives into a host buffer and
copies it to the device when the receive completes (``wait``, ``test``,
``wait_any``). Two explicit copies per message, never an implicit
conversion; a numpy array passes straight through (each transport's
point-to-point methods start with ``if not isinstance(buf, np.ndarray)``,
one type check on the hot path).

Host buffers are pinned (page-locked) on a GPU (``backend.host_empty``): the
copies then run at the bus's full speed and need no extra bounce inside the
driver. Every copy is counted in :data:`STAGED` (every rank of the process
adds to it) and, with ``MINIDIST_TRACE=1``, printed beside the messages::

    rank 0 | staged device -> host | 800 bytes

Cost: each message's n bytes cross the host link twice (device -> host at
the sender, host -> device at the receiver) on top of the message itself.
The collectives stage once per call instead (``collectives/staging.py``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from minidist import backend
from minidist.comm.transport.communicator import Communicator, Request
from minidist.comm.transport.stats import Counters
from minidist.comm.transport.trace import trace_enabled


@dataclass
class StagedCopies(Counters):
    """Copies between device and host made for communication, and their bytes."""

    to_host: int = 0
    to_device: int = 0
    bytes_to_host: int = 0
    bytes_to_device: int = 0


STAGED = StagedCopies()


def _note(c: Communicator | None, direction: str, nbytes: int) -> None:
    if direction == "host":
        STAGED.to_host, STAGED.bytes_to_host = STAGED.to_host + 1, STAGED.bytes_to_host + nbytes
    else:
        STAGED.to_device += 1
        STAGED.bytes_to_device += nbytes
    if trace_enabled():
        rank = "?" if c is None else c.rank
        arrow = "device -> host" if direction == "host" else "host -> device"
        sys.stderr.write(f"rank {rank} | staged {arrow} | {nbytes} bytes\n")
        sys.stderr.flush()


def to_host(array: Any, c: Communicator | None = None) -> np.ndarray:
    """A host copy of the device ``array``, in a pinned buffer on a GPU (counted)."""
    host = backend.to_numpy(array, out=backend.host_empty(array.shape, array.dtype))
    _note(c, "host", host.nbytes)
    return host


def to_device(host: np.ndarray, like: Any, c: Communicator | None = None) -> Any:
    """``host`` copied to the device ``like`` lives on (counted)."""
    _note(c, "device", host.nbytes)
    return backend.xp_of(like).asarray(host)


# --- point to point (each transport calls these for a buffer that is not numpy's) ----
def isend(c: Communicator, buf: Any, dest: int, tag: int) -> Request:
    """Send the device ``buf``: copy it to the host, send the copy."""
    _check_device(buf, c)
    host = to_host(buf, c)
    return Staged(c.isend(host, dest, tag), host)


def irecv(c: Communicator, buf: Any, source: int, tag: int) -> Request:
    """Receive into the device ``buf``: into a host buffer, copied up on completion."""
    _check_device(buf, c)
    host = backend.host_empty(buf.shape, buf.dtype)
    return Staged(c.irecv(host, source, tag), host, buf)


class Staged(Request):
    """A send or receive of a device array, through the host buffer ``host``.

    A receive (``device`` given) copies ``host`` into ``device`` once it has
    completed. Anything else a transport asks of a request (the MPI
    ``request``, the in-process ``done``, ``peers``, ``what``) is the inner one's.
    """

    def __init__(self, inner: Request, host: np.ndarray, device: Any = None) -> None:
        self.inner, self.host, self.device = inner, host, device
        self.copied = device is None

    def wait(self) -> None:
        self.inner.wait()
        self.complete()

    def test(self) -> bool:
        if not self.inner.test():
            return False
        self.complete()
        return True

    def complete(self) -> None:
        """The copy to the device, once (``wait_any`` calls it after the inner wait)."""
        if not self.copied:
            self.device[...] = to_device(self.host, self.device)
            self.copied = True

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not yet set (a copy being made): no inner request to ask
            raise AttributeError(name)
        return getattr(self.inner, name)


def _check_device(buf: Any, c: Communicator | None) -> None:
    if not backend.on_device(buf) or not buf.flags.c_contiguous:
        where = "" if c is None else f"rank {c.rank}: "
        raise ValueError(f"{where}messages need a C-contiguous numpy or device array "
                         f"(use np.ascontiguousarray), got {type(buf).__name__}")


# --- CUDA-aware MPI: GPU memory handed to MPI as it is ----------------------------------
def direct(buf: Any) -> bool:
    """True when ``buf`` is a GPU array and MPI reads GPU memory itself: the MPI
    transport then sends and receives it as it is (no staging, nothing counted in
    ``STAGED``), once the GPU's queue has finished with it."""
    if not (backend.on_gpu(buf) and mpi_reads_gpu_memory()):
        return False
    backend.xp_of(buf).cuda.get_current_stream().synchronize()  # the array's last writes
    return True


@functools.cache
def mpi_reads_gpu_memory() -> bool:
    """Whether this process's MPI library says it takes CUDA memory in its calls.

    MPI 4.1's way: ``cuda`` among the memory kinds of ``COMM_WORLD``'s info key
    ``mpi_memory_alloc_kinds`` (MPICH). Open MPI's: ``MPIX_Query_cuda_support()``
    returns 1, in the ``libmpi`` mpi4py loaded (MPICH has it too; mpi4py does not
    wrap it). ``MINIDIST_CUDA_AWARE=0`` says no whatever the library says (to
    compare the two paths, or around a library that errs).
    """
    if os.environ.get("MINIDIST_CUDA_AWARE", "").strip() == "0":
        return False
    queries = _loaded_mpi_functions("MPIX_Query_cuda_support")
    return cuda_among(memory_kinds()) or any(query() == 1 for query in queries)


def memory_kinds() -> str:
    """MPI 4.1's ``mpi_memory_alloc_kinds`` of ``COMM_WORLD`` ("" when the library has none)."""
    from mpi4py import MPI

    info = MPI.COMM_WORLD.Get_info()
    kinds = info.Get("mpi_memory_alloc_kinds") or ""
    info.Free()
    return kinds


def cuda_among(kinds: str) -> bool:
    """Whether MPI 4.1's memory kinds (``"mpi,system,cuda:device"``) include CUDA's."""
    return any(kind.strip().split(":")[0] == "cuda" for kind in kinds.split(","))


def _loaded_mpi_functions(name: str) -> list[Any]:
    """The function ``name`` of each MPI library this process has loaded (Linux's map of
    the process names them; none elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libmpi.so" in line}
    except OSError:
        return []
    libraries = (ctypes.CDLL(path, mode=os.RTLD_NOLOAD) for path in sorted(paths))
    return [getattr(lib, name) for lib in libraries if hasattr(lib, name)]
