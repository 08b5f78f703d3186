"""Gradient buckets: many small tensors sent as a few large messages (Lab 4, Task 2).

A model has tens to hundreds of parameter tensors. One allreduce per tensor
(Lab 4, Task 1) pays the per-message latency α ``2(P-1)`` times per tensor:
for T tensors, ``2(P-1)·T·α`` of pure latency per step. Copying the
gradients into a few flat buffers ("buckets") and reducing each buffer once
pays it ``2(P-1)·K·α`` times for K buckets, with the same ``2(P-1)/P·N``
bytes per rank (ring).

But not one single bucket: a bucket can only travel once *all* of its
gradients exist, and backward produces them from the last layer to the
first. Buckets filled in that order (reverse registration order) let the
first ones travel while backward still computes the earlier layers. Hence
two sizes, as in PyTorch's DDP: a small first bucket that can leave as soon
as the last layer is done, then large ones.

:func:`plan_buckets` is the lab's answer, line for line. It is arithmetic on
shapes, so every rank computes the same plan without a message, and the
buckets are reduced in the same order everywhere (a prerequisite:
allreduces are matched by their order).

A :class:`Bucket` is one flat buffer, averaged in the lab's three phases:

1. ``pack``: each gradient copied into its slot of the buffer;
   communication (``allreduce``): the whole buffer summed over the ranks, once;
2. ``unpack``: each ``p.grad`` becomes its slot, the average.

:class:`~minidist.parallel.overlap.Reducer` runs these phases during backward,
each as early as it can; what makes that fast is explained there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidist import backend
from minidist.comm import Communicator, allreduce
from minidist.util.answers import lab_answer

MB = 1 << 20


@lab_answer("lab04")
def plan_buckets(params: list[Any], bucket_bytes: float,
                 first_bucket_bytes: float | None = None) -> list[list[int]]:
    """Indices of ``params`` in buckets, last parameter first.

    Walks ``params`` in reverse and puts each tensor in the current bucket,
    unless it would take the bucket past its capacity (``first_bucket_bytes``
    for the first bucket, by default ``bucket_bytes``; ``bucket_bytes`` for
    the others) or has another dtype than the bucket's tensors (a flat buffer
    has one dtype): then the bucket is closed and a new one starts with it. A
    tensor larger than the capacity gets a bucket of its own; ``bucket_bytes=0``
    gives one bucket per tensor, ``float("inf")`` one bucket per run of a dtype.
    Cost: O(T) for T tensors, no message.
    """
    first = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    buckets, current, used = [], [], 0
    for index in reversed(range(len(params))):
        p = params[index]
        capacity = first if not buckets else bucket_bytes
        if current and (used + p.data.nbytes > capacity or p.dtype != params[current[0]].dtype):
            buckets.append(current)  # it does not fit, or is another dtype: close this bucket
            current, used = [], 0
        current.append(index)
        used += p.data.nbytes
    if current:
        buckets.append(current)
    return buckets


class Bucket:
    """One flat buffer: the gradients of ``params`` (in plan order), then one flag each.

    A flag is 1 where this rank packed a gradient, 0 where it packed zeros (a
    parameter it did not use this step). After the sum over the ranks a flag
    counts the ranks that used its parameter: one that no rank used keeps
    ``.grad`` None, as in one process. One number per tensor, no extra message.

    ``scale`` multiplies each gradient on its way in (the reducer packs with
    ``1/P``: see :mod:`~minidist.parallel.overlap`). After :meth:`unpack` each
    ``p.grad`` *is* its slot of the buffer, until the bucket is packed again.
    """

    @lab_answer("lab04")
    def __init__(self, params: list[Any], scale: float = 1.0) -> None:
        self.params = params
        self.scale = np.dtype(params[0].dtype).type(scale)  # a scalar of the buffer's dtype
        offsets = np.cumsum([0] + [p.size for p in params]).tolist()
        self.numel = offsets[-1]  # gradient entries; the flags follow them
        xp = backend.xp_of(params[0].data)  # the buffer lives where the parameters do
        self.buffer = xp.zeros(self.numel + len(params), dtype=params[0].dtype)
        self.slots = [self.buffer[lo:hi].reshape(p.shape)  # views, one per parameter
                      for lo, hi, p in zip(offsets, offsets[1:], params, strict=False)]
        self.flags = self.buffer[self.numel:]
        self.packed: set[int] = set()  # positions in ``params`` whose gradient is in

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    @property
    def complete(self) -> bool:
        return len(self.packed) == len(self.params)

    def pack(self, position: int, grad: Any) -> None:
        """1. Copy this rank's gradient of ``params[position]`` into its slot, times
        ``scale`` (None: zeros, flag 0)."""
        if grad is None:
            self.slots[position][...] = 0
            self.flags[position] = 0
        else:
            backend.xp_of(grad).multiply(grad, self.scale, out=self.slots[position])
            self.flags[position] = 1
        self.packed.add(position)

    def pack_missing(self) -> None:
        """1. Pack every gradient not packed yet (its current ``.grad``, or zeros)."""
        for position, param in enumerate(self.params):
            if position not in self.packed:
                self.pack(position, param.grad)

    def allreduce(self, comm: Communicator, algorithm: str = "ring") -> None:
        """Sum the buffer over the ranks of ``comm``, in place.
        Cost (ring): ``2(P-1)`` rounds, ``2(P-1)/P`` times the buffer's bytes per rank."""
        # communication: the whole bucket, summed over all ranks, in one allreduce
        allreduce(self.buffer, comm, "sum", algorithm, out=self.buffer, check=False)

    def unpack(self) -> None:
        """2. Each parameter's ``.grad`` becomes its slot (None if no rank used it);
        the bucket is ready to be packed again."""
        for param, slot, users in zip(self.params, self.slots, self.flags.tolist(), strict=True):
            param.grad = slot if users else None
        self.packed.clear()
