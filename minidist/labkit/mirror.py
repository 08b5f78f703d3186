"""Tensors mirrored between the grader and a student's kernel.

A check builds tensors (parameters, a graph) and hands them to the student's
code, which reads them, updates them in place (``p.data -= lr * v``) or sets
their ``.grad``. When the code runs in another process, each side keeps a
``Mirrors`` table: a tensor gets an id the first time it crosses, the other
side builds its twin (with the graph behind it: each op's Function, inputs
and what its forward saved), and before and after every call the states
that changed since the last crossing are sent: data, grad, requires_grad,
and whether ``.data`` became a new array (``replaced``) or was updated in
place, so that ``p.data is array`` means on the grader's side what it meant
in the kernel.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.labkit import wire

CONTEXT_FIELDS = ("fn", "inputs", "needs_input_grad", "saved_tensors", "parents")


def digest(value: Any) -> Any:
    """What tells whether ``value`` (an array, or an object) changed: shape, dtype, a hash."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return (value.shape, value.dtype.str,
                hashlib.blake2b(value.tobytes(), digest_size=16).digest())
    return ("object", id(value))


class Mirrors:
    """This side's half of the mirrored tensors: id <-> tensor, and what was last sent."""

    def __init__(self, first_id: int, step: int):
        self.tensors: dict[int, Any] = {}
        self._ids: dict[int, int] = {}  # id(tensor) -> mirror id
        self._synced: dict[int, tuple] = {}  # mirror id -> (fingerprint, id(data)) at last crossing
        self._next, self._step = first_id, step

    def _fingerprint(self, tensor: Any) -> tuple:
        return (bool(tensor.requires_grad), digest(tensor.data), digest(tensor.grad))

    def _mark_synced(self, mid: int) -> None:
        tensor = self.tensors[mid]
        self._synced[mid] = (self._fingerprint(tensor), id(tensor.data))

    def refer(self, tensor: Any, pending: list, encode: Callable[[Any], Any],
              with_graph: bool) -> dict:
        """The ``$tensor`` marker of ``tensor``; a tensor crossing for the first time
        (and, ``with_graph``, every tensor of its graph before it) goes into ``pending``."""
        mid = self._ids.get(id(tensor))
        if mid is None:
            mid, self._next = self._next, self._next + self._step
            self._ids[id(tensor)] = mid
            self.tensors[mid] = tensor
            state = self._state(mid, full=True)
            ctx = getattr(tensor, "_ctx", None)
            state["ctx"] = self._context(ctx, encode) if with_graph and ctx is not None else None
            pending.append(state)
            self._mark_synced(mid)
        return {"$tensor": mid}

    def _context(self, ctx: Any, encode: Callable[[Any], Any]) -> dict:
        attrs = {k: v for k, v in vars(ctx).items() if k not in CONTEXT_FIELDS}
        return {"fn": encode(ctx.fn), "inputs": encode(tuple(ctx.inputs)),
                "needs": encode(tuple(ctx.needs_input_grad)),
                "saved": encode(tuple(ctx.saved_tensors)), "parents": encode(list(ctx.parents)),
                "attrs": encode(attrs)}

    def _state(self, mid: int, full: bool) -> dict:
        tensor = self.tensors[mid]
        replaced = not full and id(tensor.data) != self._synced[mid][1]
        return {"id": mid, "data": wire.encode(tensor.data, lambda _: None),
                "grad": None if tensor.grad is None else wire.encode(tensor.grad, lambda _: None),
                "requires_grad": bool(tensor.requires_grad), "replaced": replaced}

    def changed(self) -> list[dict]:
        """The states of the tensors that changed on this side since they last crossed."""
        states = []
        for mid, tensor in self.tensors.items():
            if self._fingerprint(tensor) != self._synced[mid][0]:
                states.append(self._state(mid, full=False))
                self._mark_synced(mid)
        return states

    def apply(self, states: Any, decode: Callable[[Any], Any],
              context: Callable[[dict], Any] | None) -> None:
        """Take the other side's states: update the twins, build the new ones (with their
        graph when ``context`` builds Contexts; without it, a new tensor is a leaf)."""
        from minidist.autograd import Tensor

        if not isinstance(states, list):
            raise wire.WireError("tensor states must be a list")
        for state in states:
            if not isinstance(state, dict) or not isinstance(state.get("id"), int):
                raise wire.WireError("a tensor state needs an integer id")
            mid, data = state["id"], decode(state.get("data"))
            if not isinstance(data, np.ndarray):
                raise wire.WireError("a tensor's data must be an array")
            tensor = self.tensors.get(mid)
            if tensor is None:
                tensor = Tensor(data)
                self.tensors[mid], self._ids[id(tensor)] = tensor, mid
                if context is not None and state.get("ctx") is not None:
                    tensor._ctx = context(state["ctx"])
            elif (state.get("replaced") or tensor.data.shape != data.shape
                  or tensor.data.dtype != data.dtype):
                tensor.data = data
            else:
                tensor.data[...] = data
            tensor.grad = None if state.get("grad") is None else decode(state["grad"])
            tensor.requires_grad = bool(state.get("requires_grad"))
            self._mark_synced(mid)


def build_context(fields: dict, decode: Callable[[Any], Any]) -> Any:
    """A Context from a mirrored graph node: the op's Function, inputs and saved values."""
    from minidist.autograd import Context, Function

    fn = decode(fields["fn"])
    if not (isinstance(fn, type) and issubclass(fn, Function)):
        raise wire.WireError("a graph node's op must be a Function")
    ctx = Context.__new__(Context)
    attrs = decode(fields["attrs"])
    vars(ctx).update(attrs if isinstance(attrs, dict) else {})
    ctx.fn, ctx.inputs = fn, decode(fields["inputs"])
    ctx.needs_input_grad, ctx.saved_tensors = decode(fields["needs"]), decode(fields["saved"])
    ctx.parents = decode(fields["parents"])
    return ctx
