"""Checks for Lab 8, Task 4: ZeRO's step (reduce-scatter, update my shard, allgather).

``check_zero_step`` trains a small MLP for a few steps on P
in-process ranks, each rank starting from its own weights and running
backward on its own rows, with the student's ``ShardedOptimizer`` subclass
(its ``__init__`` is the library's: one flat vector, the shards, the
library's optimiser of this rank's shard), in float64 or float32, some cases
with one parameter's gradient None on one rank at one step. Four claims, in
this order:

1. the weights: every rank ends with those of one process training on the
   global batch with the library's optimiser (what DDP reaches; a gradient
   that is None counted as zeros);
2. the gradients let go: after a step no parameter holds its gradient
   (``p.grad = None``: the flat gradient holds it);
3. the memory: the arrays a rank keeps after a step, everything reachable
   from the optimiser but the communicator, each block of memory once
   (``zero.owned_bytes``), are the formula's model states
   (``zero.values_held``): parameters N, gradients N (stage 1) or n_r
   (stage 2), optimiser state K·n_r. An answer that keeps the optimiser
   state of the whole vector, or (stage 2) the whole flat gradient, fails;
4. the traffic of each step: one ``reduce_scatter`` of the N gradients and
   one ``allgather`` of the shards padded to ceil(N/P), in the model's dtype
   (float64 buffers in a float32 model send twice the bytes), with or without
   their agreement checks, counted by the transport.

Claims 3 and 4 are made in ``lab08_zero_bytes.py``.

``check_zero_shape_error`` hands every rank a gradient of the wrong shape: the
step must raise a ValueError naming both shapes.

``check_zero_memory`` makes claim 3 again in the memory the operating system
counts for the process that holds the ranks' optimisers (``resident.py``:
when graded, the kernel's, read by the grader), on an MLP of half a million
parameters: after one step it must hold less than halfway between the
library's ZeRO and one that keeps the whole vector's optimiser state.

Each rank builds its MLP and optimiser, runs backward and steps through
probes of ``lab08_ranks.py``, so that when the lab is graded they live in
the kernel (the optimiser keeps the lent communicator from one step to the
next) and each step's traffic is counted in the grader.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.labkit.checks import expect, expect_close
from minidist.labkit.lab08 import Phases
from minidist.labkit.lab08_ranks import (
    class_of,
    zero_backward,
    zero_misshapen,
    zero_on_rank,
    zero_results,
    zero_stepped,
)
from minidist.labkit.lab08_zero_bytes import expect_memory, expect_zero_traffic
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import name_of, on_student
from minidist.labkit.resident import memory_of
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.parallel.zero import OPTIMIZERS, ShardedOptimizer
from minidist.util import chunk_bounds

LIBRARY_ZERO = ("lab08_zero_step",)
HYPER = {"sgd": dict(lr=0.1, momentum=0.9), "adam": dict(lr=0.05)}
STATES = {"sgd": 1, "adam": 2}  # K, the optimiser's values per parameter


def check_zero_step(zero_class: type, world_size: int, stage: int, optimizer: str,
                    sizes: list[int], steps: int = 3, batch_per_rank: int = 4, seed: int = 0,
                    dtype: str = "float64", unused: int | None = None,
                    block: tuple[str, ...] = LIBRARY_ZERO) -> None:
    """``zero_class(model.parameters(), c, optimizer, stage=stage, **HYPER[optimizer])``
    for ``steps`` steps on P ranks, an MLP of ``dtype``: weights, gradients let go, bytes
    kept and bytes sent per step. ``unused``: that parameter's gradient is None on the last
    rank at step 2 (it contributes zeros)."""
    __tracebackhide__ = True
    what = (f"{name_of(zero_class)}.step, ZeRO-{stage}, {optimizer}, P = {world_size}, "
            f"MLP {sizes} ({dtype}), {steps} steps"
            + ("" if unused is None else f", rank {world_size - 1}'s gradient of parameter "
               f"{unused} None at step 2"))
    is_class, sharded, _ = on_student(class_of, zero_class, "ShardedOptimizer")
    expect(is_class and sharded,
           f"{what}: build your class on ShardedOptimizer (its __init__ sets up the flat "
           "vector, the shards and the optimiser of this rank's shard)")
    rng = np.random.default_rng(seed)
    batch = world_size * batch_per_rank
    x, y = rng.normal(size=(batch * steps, sizes[0])), rng.integers(0, sizes[-1], batch * steps)
    dropped = {(world_size - 1, 1, unused)}  # (rank, step, parameter)
    reference = one_process(sizes, seed, dtype, optimizer, x, y, world_size, steps, dropped)

    def body(c: Any) -> dict[str, Any]:
        bench = on_student(zero_on_rank, zero_class, c, sizes, seed, optimizer, stage,
                           HYPER[optimizer], dtype)
        phases = Phases(c)
        for t in range(steps):
            rows = slice(t * batch + c.rank * batch_per_rank,
                         t * batch + (c.rank + 1) * batch_per_rank)
            on_student(zero_backward, bench, c, x[rows], y[rows],
                       unused if (c.rank, t, unused) in dropped else None)
            with phases(f"step {t + 1}"):
                on_student(zero_stepped, bench, c)
        return dict(on_student(zero_results, bench), sent=phases.sent)

    results, _ = run_ranks(body, world_size, what, block)
    close = dict(rtol=1e-9, atol=1e-12) if dtype == "float64" else dict(rtol=1e-4, atol=1e-6)
    for rank, r in enumerate(results):  # first: do the ranks agree?
        for i, got in enumerate(r["weights"]):
            expect_close(f"{what}: rank {rank}'s parameter {i} after the last step, against "
                         "rank 0's (every rank must end with the same weights: after the "
                         "update, allgather every rank's shard into the flat vector)", got,
                         results[0]["weights"][i], rtol=1e-12, atol=1e-14)
    against = ("one process on the global batch (DDP's weights)" if unused is None else
               f"one process averaging the ranks' gradients, rank {world_size - 1}'s of "
               f"parameter {unused} zeros at step 2 (a gradient that is None contributes zeros)")
    for rank, r in enumerate(results):
        for i, (got, p) in enumerate(zip(r["weights"], reference, strict=True)):
            expect_close(f"{what}: rank {rank}'s parameter {i} after the last step, against "
                         f"{against}", got, p, **close)
    for rank, r in enumerate(results):
        expect(not r["graded"], f"{what}: after the step rank {rank}'s parameters "
               f"{r['graded']} still hold their gradients: set p.grad = None once a gradient "
               "is packed, since the flat gradient holds it now (a step keeps no other copy)")
    n = sum(p.size for p in reference)
    expect_memory(what, results, n, world_size, stage, STATES[optimizer], np.dtype(dtype))
    expect_zero_traffic(what, results, n, world_size, steps, np.dtype(dtype))


def check_zero_shape_error(zero_class: type, world_size: int, stage: int, sizes: list[int],
                           param: int, seed: int = 0,
                           block: tuple[str, ...] = LIBRARY_ZERO) -> None:
    """Every rank's gradient of parameter ``param`` in a wrong shape (a matrix's transposed
    shape, as many values; a vector one value longer): the step raises, on every rank, a
    ValueError that names both shapes."""
    __tracebackhide__ = True
    model = MLP(sizes, dtype=np.float64, rng=seed)
    shape = tuple(list(model.parameters())[param].shape)
    wrong = shape[::-1] if len(shape) == 2 and shape[0] != shape[1] else (shape[0] + 1,)
    what = (f"{name_of(zero_class)}.step, ZeRO-{stage}, P = {world_size}, MLP {sizes}, "
            f"parameter {param} of shape {shape} given a gradient of shape {wrong}")
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(world_size, sizes[0])), rng.integers(0, sizes[-1], world_size)

    def body(c: Any) -> tuple[str, str]:
        bench = on_student(zero_on_rank, zero_class, c, sizes, seed, "sgd", stage,
                           HYPER["sgd"])
        on_student(zero_backward, bench, c, x[c.rank:c.rank + 1], y[c.rank:c.rank + 1])
        return on_student(zero_misshapen, bench, c, param, wrong)

    results, _ = run_ranks(body, world_size, what, block)
    for rank, (raised, said) in enumerate(results):
        expect(raised == "ValueError" and names(shape, said) and names(wrong, said),
               f"{what}: on rank {rank} the step "
               + (f"raised {raised}: {said}" if raised else "went on as if nothing was wrong")
               + "; a gradient whose shape is not its parameter's is an error: raise a "
               "ValueError naming both shapes, before the reduce-scatter")


def names(shape: tuple[int, ...], said: str) -> bool:
    """Whether ``said`` names ``shape``: (7, 4), [7, 4] or 7x4, spaces aside."""
    said = said.replace(" ", "")
    ways = [str(shape), str(list(shape)), "x".join(map(str, shape)), f"({shape[0]})"]
    return any(way.replace(" ", "") in said for way in ways)


def one_process(sizes: list[int], seed: int, dtype: str, optimizer: str, x: np.ndarray,
                y: np.ndarray, world_size: int, steps: int,
                dropped: set[tuple[int, int, int | None]]) -> list[np.ndarray]:
    """The weights after ``steps`` steps of the library's optimiser on the average of the
    ranks' gradients (each on its own rows; those ``dropped`` zeros), in one process."""
    model = MLP(sizes, dtype=np.dtype(dtype), rng=seed)
    params = list(model.parameters())
    opt = OPTIMIZERS[optimizer](params, **HYPER[optimizer])
    per_rank = len(x) // (steps * world_size)
    for t in range(steps):
        average = [np.zeros_like(p.data) for p in params]
        for rank in range(world_size):
            opt.zero_grad()
            rows = slice((t * world_size + rank) * per_rank, (t * world_size + rank + 1) * per_rank)
            cross_entropy(model(Tensor(x[rows].astype(dtype))), y[rows]).backward()
            for i, p in enumerate(params):
                if (rank, t, i) not in dropped:
                    average[i] += p.grad / world_size
        for p, g in zip(params, average, strict=True):
            p.grad = g.astype(p.data.dtype)
        opt.step()
    return [p.data for p in params]


def resident_after_a_step(zero_class: type, world_size: int, stage: int, optimizer: str,
                          sizes: list[int], what: str, block: tuple[str, ...]) -> int | None:
    """Bytes the process holding ``zero_class``'s objects keeps after one step on each of P
    ranks, every rank's model and optimiser still held (None where it cannot be read)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(world_size, sizes[0])), rng.integers(0, sizes[-1], world_size)

    def body(c: Any) -> Any:
        bench = on_student(zero_on_rank, zero_class, c, sizes, 0, optimizer, stage,
                           HYPER[optimizer])
        on_student(zero_backward, bench, c, x[c.rank:c.rank + 1], y[c.rank:c.rank + 1])
        on_student(zero_stepped, bench, c)
        return bench

    with memory_of(zero_class) as grown:
        benches, _ = run_ranks(body, world_size, what, block)
    del benches  # held until the memory was read
    return grown.kept


def check_zero_memory(zero_class: type, world_size: int = 4, stage: int = 1,
                      optimizer: str = "adam", sizes: tuple[int, ...] = (64, 512, 512, 512, 10),
                      block: tuple[str, ...] = LIBRARY_ZERO) -> None:
    """The resident memory P ranks' models and optimisers hold after one step, against the
    library's ZeRO run here and the whole vector's optimiser state on every rank."""
    __tracebackhide__ = True
    sizes = list(sizes)
    what = (f"{name_of(zero_class)}, ZeRO-{stage}, {optimizer}, P = {world_size}, MLP {sizes}, "
            "one step")
    library = resident_after_a_step(ShardedOptimizer, world_size, stage, optimizer, sizes,
                                    what, ())
    got = resident_after_a_step(zero_class, world_size, stage, optimizer, sizes, what, block)
    if got is None or library is None:
        return  # no /proc here: the claim rests on check_zero_step's bytes kept
    n = sum(p.size for p in MLP(sizes, dtype=np.float64, rng=0).parameters())
    whole = 8 * STATES[optimizer] * sum(n - (hi - lo) for lo, hi in chunk_bounds(n, world_size))
    mib = 2 ** 20
    expect(got <= library + whole / 2, f"{what}: after the step the process holding the "
           f"ranks keeps {got / mib:.0f} MiB more memory, as the operating system counts it; "
           f"with the library's ZeRO it keeps {library / mib:.0f} MiB, and the whole vector's "
           f"optimiser state on every rank would add {whole / mib:.0f} MiB: update only the "
           "shard, with the optimiser of the shard (self.optimizer)")

