"""Device arrays through the collectives: staged through host copies.

Both transports move host memory (numpy buffers: mpi4py's buffer methods, the
in-process copies). A collective handed a device array (cupy's, or the strict
CI guard's) therefore copies it to the host once, runs the lesson on the host
copy, and copies the result back to the device once: two explicit copies per
call, never an implicit conversion. A numpy array passes straight through.

The copies are those of point-to-point messages (``transport/device.py``):
pinned host buffers on a GPU, counted in ``STAGED`` and printed with
``MINIDIST_TRACE=1``. Cost: the N bytes of the array cross the host link twice
per call, on top of the collective's own traffic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.comm.transport.communicator import Communicator
from minidist.comm.transport.device import STAGED, StagedCopies, to_device, to_host

__all__ = ["STAGED", "StagedCopies", "staged"]


def staged(collective: Callable[..., Any], arr: Any, *args: Any, **kwargs: Any) -> Any:
    """``collective(arr, *args, **kwargs)`` for a device ``arr`` (and ``out=``), through
    host copies as above. A tuple result (alltoallv's) moves its first item.

    Each collective starts with ``if backend.on_device(arr): return staged(...)``, so it
    stays a plain function (the labs' checks block it by swapping its code)."""
    c = next((a for a in (*args, *kwargs.values()) if isinstance(a, Communicator)), None)
    host = to_host(arr, c)
    out = kwargs.get("out")
    if out is not None:
        kwargs["out"] = host if out is arr else np.empty(out.shape, out.dtype)
    result = collective(host, *args, **kwargs)
    if result is None:
        return None
    first = result[0] if isinstance(result, tuple) else result
    moved = to_device(first, arr, c)
    if out is not None:
        out[...] = moved
        moved = out
    return (moved, *result[1:]) if isinstance(result, tuple) else moved
