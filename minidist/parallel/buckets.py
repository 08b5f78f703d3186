"""Gradient buckets: many small tensors sent as a few large messages.

A model has tens to hundreds of parameter tensors. One allreduce per tensor
pays the per-message latency α once per tensor and per round (a ring has
2(P-1) rounds): for T tensors, ``2(P-1)·T·α`` of pure latency per step.
Copying the gradients into a few flat buffers ("buckets") of ~25 MB and
reducing each buffer once pays it ``2(P-1)·K·α`` times for K buckets, with
the same ``2(P-1)/P·N`` bytes.

But not one single bucket: a bucket can only travel once *all* of its
gradients exist, and backward produces them from the last layer to the
first. Buckets filled in that order (reverse registration order) let the
first ones travel while backward still computes the earlier layers: the
communication hides behind computation. Hence two sizes, as in PyTorch's
DDP: a small first bucket (1 MB) that leaves as soon as the last layer is
done, then large ones.

:func:`plan_buckets` is pure arithmetic on shapes, so every rank computes the
same plan without a message, and the buckets are reduced in the same order
everywhere (a prerequisite: allreduces are matched by order).

A :class:`Bucket` owns one flat buffer: its parameters' gradients, one after
the other, then one *flag* per parameter: 1 if this rank produced that
gradient, 0 if it contributes zeros (a parameter unused this step). After the
allreduce (a sum) a flag counts the ranks that used the parameter, at the
cost of one extra number per tensor and no extra message.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MB = 1 << 20


def plan_buckets(params: list[Any], bucket_mb: float = 25, first_bucket_mb: float = 1
                 ) -> list[list[int]]:
    """Group parameter indices into buckets, last parameter first.

    Walks ``params`` (which have ``.size``, ``.dtype``) in reverse and fills a
    bucket until the next tensor would take it past its capacity:
    ``first_bucket_mb`` for the first bucket, ``bucket_mb`` for the others.
    A tensor larger than the capacity gets a bucket of its own; a bucket
    holds one dtype only. ``bucket_mb=0`` gives one bucket per tensor,
    ``float("inf")`` (for both sizes) a single bucket per dtype.
    Cost: O(number of tensors).
    """
    if bucket_mb < 0 or first_bucket_mb < 0:
        raise ValueError(f"bucket sizes must be >= 0 MB, got {bucket_mb} and {first_bucket_mb}")
    buckets: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index in reversed(range(len(params))):
        param = params[index]
        nbytes = param.size * np.dtype(param.dtype).itemsize
        capacity = (first_bucket_mb if not buckets else bucket_mb) * MB
        same_dtype = not current or np.dtype(params[current[0]].dtype) == np.dtype(param.dtype)
        if current and (used + nbytes > capacity or not same_dtype):
            buckets.append(current)
            current, used = [], 0
        current.append(index)
        used += nbytes
    if current:
        buckets.append(current)
    return buckets


class Bucket:
    """One flat buffer for the gradients of ``params`` (in plan order), plus their flags.

    ``put`` scales each gradient by ``scale`` on its way in (``1/P`` for an
    average: the sum over ranks is then the mean, with no pass over the buffer
    afterwards; it differs from dividing the sum by at most a rounding). After
    :meth:`write_back` each parameter's ``.grad`` *is* its slot of the buffer
    (a view, as PyTorch's ``gradient_as_bucket_view``): no copy out either,
    valid until the next synchronised backward refills the bucket.
    """

    def __init__(self, params: list[Any], scale: float = 1.0) -> None:
        self.params = params
        self.scale = np.dtype(params[0].dtype).type(scale)  # a scalar of the buffer's dtype
        offsets = np.cumsum([0] + [p.size for p in params]).tolist()
        self.numel = offsets[-1]  # gradient entries; the flags follow them
        self.buffer = np.zeros(self.numel + len(params), dtype=params[0].dtype)
        self.slots = [self.buffer[lo:hi].reshape(p.shape)  # views, one per parameter
                      for lo, hi, p in zip(offsets, offsets[1:], params, strict=False)]
        self.flags = self.buffer[self.numel:]  # 1 where this rank produced the gradient
        self.ready: set[int] = set()  # positions in ``params`` whose gradient is copied in

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    @property
    def complete(self) -> bool:
        return len(self.ready) == len(self.params)

    def put(self, position: int, grad: Any) -> None:
        """Copy this rank's gradient of ``params[position]`` in, times ``scale``
        (None: contribute zeros)."""
        if grad is None:
            self.slots[position][...] = 0
            self.flags[position] = 0
        else:
            np.multiply(grad, self.scale, out=self.slots[position])
            self.flags[position] = 1
        self.ready.add(position)

    def fill_missing(self) -> None:
        """End of backward: parameters whose hook never fired send their current ``.grad``
        (accumulated under ``no_sync``), or zeros if they have none."""
        for position, param in enumerate(self.params):
            if position not in self.ready:
                self.put(position, param.grad)

    def write_back(self) -> None:
        """After the sum over ranks: make each parameter's ``.grad`` its slot. A parameter
        that no rank used keeps None, exactly as one process would leave it."""
        for param, slot, users in zip(self.params, self.slots, self.flags.tolist(), strict=True):
            param.grad = slot if users else None
