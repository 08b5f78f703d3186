"""Arrays that start on a page, so that where a buffer lies never slows a copy.

Every message between two ranks of one host is a copy, and a copy's speed
can depend on where its two buffers lie relative to each other. On some
CPUs (AMD's with fast ``rep movsb``, used by glibc's ``memcpy`` and by the
kernel's copy behind MPI's single-copy transfers) a copy whose destination
starts a few bytes after its source, counted within a 4 KiB page (the two
addresses' difference modulo 4096 between 1 and 31), runs several times
slower than the same copy at any other offset. Two arrays allocated one
after the other from the heap sit 16 bytes further apart than their length:
exactly that case whenever the length is a multiple of the page. Whether it
happens then depends on the process's history (which heap blocks were free,
whether the allocator mapped the array on its own pages), and so does the
time of an exchange or of ``out[...] = arr``.

The long buffers the library makes for itself (the receive buffers a
communicator keeps, ``comm.allreduce``'s result when no ``out`` is given,
each from 64 KiB) and the benchmarks' buffers (as MPI's own benchmarks do)
therefore start on a page: :func:`page_aligned_empty`. Between two such
buffers the offset is that of the elements themselves, the same on every
run. Shorter ones stay numpy's own (finding a page start costs a few
microseconds, too much on a short message's path), and arrays the caller
passes in lie where the caller put them. The README's benchmark notes give the
figures of the course's machine.
"""

from __future__ import annotations

import math

import numpy as np

PAGE = 4096  # bytes


def page_aligned_empty(shape: int | tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised C-contiguous numpy array whose first byte starts a page; one
    shorter than a page is numpy's own (``np.empty``: its cache of small blocks is
    faster to get, and a copy that short costs little wherever it lies)."""
    dtype = np.dtype(dtype)
    nbytes = (shape if isinstance(shape, int) else math.prod(shape)) * dtype.itemsize
    if nbytes < PAGE:
        return np.empty(shape, dtype)
    raw = np.empty(nbytes + PAGE, np.uint8)
    start = -raw.ctypes.data % PAGE
    return raw[start:start + nbytes].view(dtype).reshape(shape)
