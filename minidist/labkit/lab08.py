"""Checks for Lab 8 (tensor, expert and sharded parallelism), Tasks 1 and 2: tensor parallelism.

1. ``f_and_g``: the student's two autograd Functions on P in-process ranks.
   f (copy to ranks): forward returns x as it is and sends nothing; backward
   gives x the sum over the ranks of their gradients, with the traffic of one
   ``comm.allreduce``. g (sum over ranks): forward returns the sum of the
   ranks' partial outputs with one allreduce; backward passes the gradient
   through and sends nothing.
2. ``mlp_split``: the student's MLP block built on every rank from the whole
   weights. Each rank keeps a copy of its slice (the rows of w1 and b1 of its
   hidden units, the same columns of w2, b2 whole), sharing no memory with the
   weights it was given; the output, the input's gradient
   and every weight's gradient equal the whole block's in one process
   (float64); forward sends exactly one allreduce of the output and backward
   one of the input's gradient, counted by the transport: an answer that
   allreduces twice, or gathers the hidden layer, fails there.
3. ``moe_dispatch``: ``lab08_moe.py``; 4. ``zero_step``: ``lab08_zero.py``.

Traffic is compared with what the library's collectives send for the same
arrays, with or without their agreement check (``check=``), each rank's
messages and bytes in each phase (:class:`Phases`). Every multi-rank run is
bounded in time (``run_ranks``) and a deadlock is an error, never a hang.
While a task is checked the library's answer to it is blocked.

Each rank's part of a check drives the student's code phase by phase
through probes of ``lab08_ranks.py``, so that when the lab is graded the
student's objects live in the kernel while the ranks, each phase's traffic
and the verdict stay in the grader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.comm import allreduce
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.lab08_ranks import (
    backward_of,
    class_of,
    f_and_g_results,
    f_forward,
    g_forward,
    mlp_forward,
    mlp_on_rank,
    mlp_refusal,
    mlp_results,
)
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import name_of, on_student
from minidist.nn import functional as F

LIBRARY_F_AND_G = ("lab08_f_and_g",)
LIBRARY_MLP_SPLIT = ("lab08_mlp_split",)
Traffic = list[tuple[int, int]]  # (messages, bytes) sent by each rank


class Phases:
    """What one rank sent in each named phase: ``with phases("forward"): ...``, then
    ``phases.sent["forward"]`` is ``(messages, bytes)``."""

    def __init__(self, c: Any) -> None:
        self.c, self.sent = c, {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        stats = self.c.stats
        messages, sent = stats.messages_sent, stats.bytes_sent
        yield
        self.sent[name] = (stats.messages_sent - messages, stats.bytes_sent - sent)


def traffic(world_size: int, body: Callable[[Any], None]) -> Traffic:
    """Each rank's (messages, bytes) sent by ``body(c)`` on in-process ranks, unblocked."""
    _, stats = run_ranks(body, world_size, "the library's collectives", block=())
    return [(s.messages_sent, s.bytes_sent) for s in stats]


def allreduce_traffic(world_size: int, shapes: list[tuple[int, ...]], check: bool) -> Traffic:
    """What one float64 ``comm.allreduce`` per shape sends from each rank."""
    def body(c: Any) -> None:
        for shape in shapes:
            allreduce(np.zeros(shape), c, check=check)

    return traffic(world_size, body)


def expect_traffic(what: str, got: Traffic, options: list[Traffic], claim: str,
                   hints: Callable[[], dict[str, list[Traffic]]] = dict) -> None:
    """Each rank's (messages, bytes) must be one of ``options`` (the library's collectives
    with or without their check), as ``claim`` says; ``hints()``, computed only on a
    failure, names traffic the answer may have sent instead."""
    __tracebackhide__ = True
    if got in options:
        return
    rank = next(r for r in range(len(got)) if got[r] != options[0][r])
    (messages, sent), (m0, b0) = got[rank], options[0][rank]
    named = next((f": that is {name}" for name, traffics in hints().items()
                  if got in traffics), "")
    raise CheckFailed(f"{what}: rank {rank} sent {messages} messages ({sent} bytes){named}; "
                      f"{claim}: {m0} messages ({b0} bytes)")


def per_rank(results: list[dict[str, Any]], phase: str) -> Traffic:
    """Each rank's traffic in ``phase``, from the ``sent`` of its :class:`Phases`."""
    return [r["sent"][phase] for r in results]


# --- Task 1: f and g -------------------------------------------------------------------------
def check_f_and_g(copy_to_ranks: type, sum_over_ranks: type, world_size: int,
                  shape: tuple[int, ...], seed: int = 0,
                  block: tuple[str, ...] = LIBRARY_F_AND_G) -> None:
    """f = ``copy_to_ranks.apply(x, c)`` on the same x everywhere, backward from a
    different dL/dy on each rank; g = ``sum_over_ranks.apply(partial, c)`` on a different
    partial on each rank, backward from the same dL/dz everywhere: values and traffic."""
    __tracebackhide__ = True
    for cls, name in ((copy_to_ranks, "f"), (sum_over_ranks, "g")):
        _, function, shown = on_student(class_of, cls, "Function")
        expect(function, f"{name} must be a minidist Function (a class with forward and "
               f"backward), got {shown}")
    what = (f"{name_of(copy_to_ranks)} (f) and {name_of(sum_over_ranks)} (g), "
            f"P = {world_size}, arrays of shape {shape}")
    rng = np.random.default_rng(seed)
    x, partials = rng.normal(size=shape), rng.normal(size=(world_size, *shape))
    dy, dz = rng.normal(size=(world_size, *shape)), rng.normal(size=shape)

    def body(c: Any) -> dict[str, Any]:
        phases = Phases(c)
        with phases("f forward"):
            bench = on_student(f_forward, copy_to_ranks, c, x)
        with phases("f backward"):
            on_student(backward_of, bench, c, "y", dy[c.rank])
        with phases("g forward"):
            on_student(g_forward, sum_over_ranks, bench, c, partials[c.rank])
        with phases("g backward"):
            on_student(backward_of, bench, c, "z", dz)
        return dict(on_student(f_and_g_results, bench), sent=phases.sent)

    results, _ = run_ranks(body, world_size, what, block)
    one = [allreduce_traffic(world_size, [shape], check) for check in (True, False)]
    nothing = [[(0, 0)] * world_size]
    for rank, r in enumerate(results):
        expect_close(f"{what}: f's forward on rank {rank} (the identity: every rank already "
                     "holds the whole x)", r["y"], x, rtol=1e-12, atol=1e-14)
    expect_traffic(f"{what}: f's forward", per_rank(results, "f forward"), nothing,
                   "f's forward sends nothing")
    expect_sum(f"{what}: f's backward, x's gradient on rank", "dL/dx", results, "x_grad", dy,
               "each rank's slice of the layer gave a part of dL/dx: f's backward sums them")
    expect_traffic(f"{what}: f's backward", per_rank(results, "f backward"), one,
                   "f's backward sends one allreduce of the gradient")
    expect_sum(f"{what}: g's forward on rank", "partial output", results, "z", partials,
               "g's forward sums the ranks' partial outputs (one allreduce)")
    expect_traffic(f"{what}: g's forward", per_rank(results, "g forward"), one,
                   "g's forward sends one allreduce of the partial output")
    for rank, r in enumerate(results):
        try:
            expect_close(f"{what}: g's backward, the partial's gradient on rank {rank}",
                         r["partial_grad"], dz, rtol=1e-12, atol=1e-14)
        except CheckFailed as failure:
            summed = r["partial_grad"] is not None and np.allclose(r["partial_grad"],
                                                                   world_size * dz)
            raise CheckFailed(f"{failure}" + (" -- that is the sum over the ranks of dL/dz; "
                              "every rank already holds the whole dL/dz, so g's backward is "
                              "the identity" if summed else "")) from None
    expect_traffic(f"{what}: g's backward", per_rank(results, "g backward"), nothing,
                   "g's backward sends nothing")


def expect_sum(what: str, name: str, results: list[dict[str, Any]], key: str,
               parts: np.ndarray, rule: str) -> None:
    """Every rank's ``key`` is the sum of ``parts`` over the ranks (``rule`` says why)."""
    __tracebackhide__ = True
    for rank, r in enumerate(results):
        try:
            expect_close(f"{what} {rank}", r[key], parts.sum(axis=0), rtol=1e-10, atol=1e-12)
        except CheckFailed as failure:
            own = r[key] is not None and np.allclose(r[key], parts[rank], rtol=1e-12)
            hint = f"that is this rank's own {name}: " if own else ""
            raise CheckFailed(f"{failure} -- {hint}{rule}") from None


# --- Task 2: the MLP split by columns, then rows ---------------------------------------------
def whole_mlp(w: dict[str, np.ndarray], x: np.ndarray, dy: np.ndarray,
              activation: str) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """The whole block in one process: output, dL/dx and each weight's gradient."""
    t = {name: Tensor(value, requires_grad=True) for name, value in w.items()}
    xt = Tensor(x, requires_grad=True)
    hidden = getattr(F, activation)(F.linear(xt, t["w1"], t["b1"]))
    y = F.linear(hidden, t["w2"], t["b2"])
    (y * Tensor(dy)).sum().backward()
    return y.data, xt.grad, {name: p.grad for name, p in t.items()}


def check_mlp_split(mlp_class: type, world_size: int, d: int, hidden: int,
                    rows: tuple[int, ...], activation: str = "relu", seed: int = 0,
                    block: tuple[str, ...] = LIBRARY_MLP_SPLIT) -> None:
    """``mlp_class(w1, b1, w2, b2, c, activation)`` on every rank, x of shape (*rows, d):
    the slices each rank keeps, the output and every gradient against the whole block in
    one process, and exactly one allreduce forward and one backward."""
    __tracebackhide__ = True
    what = (f"{name_of(mlp_class)}, P = {world_size}, d = {d}, {hidden} hidden units, "
            f"{activation}, x of shape {(*rows, d)}")
    is_class, library, _ = on_student(class_of, mlp_class, "ParallelMLP")
    expect(is_class and not library,
           f"{what}: build your class on Module, not on the library's ParallelMLP")
    rng = np.random.default_rng(seed)
    shapes = {"w1": (hidden, d), "b1": (hidden,), "w2": (d, hidden), "b2": (d,)}
    w = {name: rng.normal(size=shape) / np.sqrt(shape[-1]) for name, shape in shapes.items()}
    x, dy = rng.normal(size=(*rows, d)), rng.normal(size=(*rows, d))
    y, x_grad, grads = whole_mlp(w, x, dy, activation)

    def body(c: Any) -> dict[str, Any]:
        bench, held, views = on_student(mlp_on_rank, mlp_class, c, w, activation)
        phases = Phases(c)
        with phases("forward"):
            on_student(mlp_forward, bench, c, x)
        with phases("backward"):
            on_student(backward_of, bench, c, "y", dy)
        return dict(on_student(mlp_results, bench), held=held, views=views, sent=phases.sent)

    results, _ = run_ranks(body, world_size, what, block)
    part = hidden // world_size
    for rank, r in enumerate(results):
        mine = slice(rank * part, (rank + 1) * part)
        expect(sorted(r["held"]) == sorted(shapes), f"{what}: rank {rank}'s layer has the "
               f"parameters {sorted(r['held'])}; the text names them w1, b1, w2, b2")
        slices = {"w1": (mine,), "b1": (mine,), "w2": (slice(None), mine), "b2": ()}
        for name, index in slices.items():
            expected = w[name][index]
            kind = (f"hidden units {mine.start}..{mine.stop - 1}" if index else "all of it")
            whole = r["held"][name].shape == shapes[name] != expected.shape
            expect_close(f"{what}: rank {rank}'s {name}, of which it keeps {kind}"
                         + (" (it kept the whole matrix: each rank holds 1/P of it)"
                            if whole else ""), r["held"][name], expected, 1e-12, 1e-14)
        expect(not r["views"], f"{what}: rank {rank}'s {', '.join(r['views'])} share memory "
               "with the whole weights the layer was given (views of w1, b1, w2, b2): keep "
               "copies of your slices (.copy()), so that training this rank's layer changes "
               "neither the caller's arrays nor another rank's")
        try:
            expect_close(f"{what}: the output on rank {rank}", r["y"], y, 1e-10, 1e-12)
        except CheckFailed as failure:
            extra = np.allclose(r["y"], y + (world_size - 1) * w["b2"], rtol=1e-10)
            raise CheckFailed(f"{failure}" + (" -- it is off by (P - 1)·b2: add b2 once, "
                              "after the sum, not to every rank's part" if extra else "")
                              ) from None
        expect_close(f"{what}: x's gradient on rank {rank}", r["x_grad"], x_grad, 1e-10, 1e-12)
        for name, index in slices.items():
            expect_close(f"{what}: rank {rank}'s gradient of {name}", r["grads"][name],
                         grads[name][index], 1e-10, 1e-12)
    n = int(np.prod(rows))

    def hints() -> dict[str, list[Traffic]]:  # what else the answer may have sent
        named = {"an allreduce of the hidden layer (n x hidden values) and one of the output":
                 [(n, hidden), (n, d)], "an allreduce of the hidden layer (n x hidden values)":
                 [(n, hidden)], "two allreduces of n x d values": [(n, d), (n, d)]}
        return {name: [allreduce_traffic(world_size, shapes, c) for c in (True, False)]
                for name, shapes in named.items()}

    for phase, of in (("forward", "the output"), ("backward", "x's gradient")):
        expect_traffic(f"{what}: {phase}", per_rank(results, phase),
                       [allreduce_traffic(world_size, [(n, d)], c) for c in (True, False)],
                       f"the column-then-row split sends exactly one allreduce of {of} "
                       f"({n} x {d} values) in {phase}", hints)
    if world_size > 1:  # the text's promise: P that does not divide hidden is an error
        uneven = {name: np.zeros(tuple(hidden + 1 if k == hidden else k for k in shape))
                  for name, shape in shapes.items()}
        refused, _ = run_ranks(lambda c: on_student(mlp_refusal, mlp_class, c, uneven,
                                                     activation), world_size, what, block)
        made = [rank for rank, no in enumerate(refused) if not no]
        expect(not made, f"{what}: with {hidden + 1} hidden units on P = {world_size} ranks "
               f"the layer was made without an error (on ranks {made}: units were dropped "
               "or kept twice): split them with slice_of, which raises a clear error when P "
               "does not divide hidden")
