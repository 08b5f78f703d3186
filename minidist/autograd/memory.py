"""How many bytes of activations does a graph keep for its backward pass?

    with md.autograd.saved_bytes() as saved:
        loss = cross_entropy(model(x), y)
        loss.backward()
    saved.peak          # the most bytes alive at once, forward and backward

A recorded op keeps arrays until backward has run its rule: what it saved for
the rule (``ctx.save_for_backward``) and its inputs (the graph's edges hold
them). Those are the step's activations, except the leaves' arrays: the
parameters and the input batch exist with or without a graph, so they are
not counted. Arrays are counted once however many ops keep them (a view
counts as the array it views, all of it), from the moment an op recorded in
the block keeps them to the moment the last such op is released, which
backward does node by node (``engine.py``). So ``current`` rises through
the forward pass and falls through backward, and ``peak`` is the memory
that gradient checkpointing (``checkpoint.py``) trades for recomputation.

Counting is per thread (each rank of the in-process transport counts its
own ops) and costs nothing outside the block but one attribute read per op.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from minidist.autograd.function import Context, observe_ops
from minidist.autograd.tensor import Tensor


class SavedBytes:
    """Bytes of activations kept by the ops recorded in a ``saved_bytes()`` block."""

    def __init__(self) -> None:
        self.current = 0  # bytes kept now
        self.peak = 0  # the most bytes kept at once so far
        self._arrays: dict[int, list[int]] = {}  # id of a kept array -> [nbytes, ops keeping it]
        self._ops: dict[weakref.ref, list[int]] = {}  # a recorded op -> the arrays it keeps

    def keep(self, ctx: Context) -> None:
        """Count what a recorded op keeps, until the op is released."""
        if not ctx.parents:  # not recorded: it keeps nothing
            return
        leaves = {id(_owner(x.data)) for x in ctx.inputs
                  if isinstance(x, Tensor) and x._ctx is None}
        kept = {}
        for item in (*ctx.inputs, *ctx.saved_tensors):
            array = _owner(item.data if isinstance(item, Tensor) else item)
            if hasattr(array, "nbytes") and id(array) not in leaves:
                kept[id(array)] = array.nbytes
        for key, nbytes in kept.items():
            self._arrays.setdefault(key, [nbytes, 0])[1] += 1
            self.current += nbytes if self._arrays[key][1] == 1 else 0
        self.peak = max(self.peak, self.current)
        self._ops[weakref.ref(ctx, self._release)] = list(kept)

    def _release(self, ref: weakref.ref) -> None:
        for key in self._ops.pop(ref):
            entry = self._arrays[key]
            entry[1] -= 1
            if entry[1] == 0:
                self.current -= entry[0]
                del self._arrays[key]


def _owner(array: Any) -> Any:
    """The array that owns the memory ``array`` views (itself if it owns it)."""
    while getattr(array, "base", None) is not None and hasattr(array.base, "nbytes"):
        array = array.base
    return array


@contextmanager
def saved_bytes() -> Iterator[SavedBytes]:
    """Count the activation bytes kept by the ops this thread records in the block:
    ``.current`` now, ``.peak`` the most at once."""
    tracker = SavedBytes()
    with observe_ops(tracker.keep):
        yield tracker
