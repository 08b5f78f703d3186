"""Checks for Lab 8, Task 4: ZeRO's step (reduce-scatter, update my shard, allgather).

``check_zero_step`` trains a small MLP (float64) for a few steps on P
in-process ranks, each rank starting from its own weights and running
backward on its own rows, with the student's ``ShardedOptimizer`` subclass
(its ``__init__`` is the library's: one flat vector, the shards, the
library's optimiser of this rank's shard). Three claims, in this order:

1. the weights: every rank ends with those of one process training on the
   global batch with the library's optimiser (what DDP reaches);
2. the memory: the arrays a rank keeps after a step, everything reachable
   from the optimiser but the communicator, each block of memory once
   (``zero.owned_bytes``), are the formula's model states
   (``zero.values_held``): parameters N, gradients N (stage 1) or n_r
   (stage 2), optimiser state K·n_r. An answer that keeps the optimiser
   state of the whole vector, or (stage 2) the whole flat gradient, fails;
3. the traffic of each step: one ``reduce_scatter`` of the N gradients and
   one ``allgather`` of the shards padded to ceil(N/P), with or without their
   agreement checks, counted by the transport.

``check_zero_memory`` makes claim 2 again in the memory the operating system
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

from itertools import product
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.comm import allgather, allreduce, reduce_scatter
from minidist.labkit.checks import CheckFailed, expect, expect_close
from minidist.labkit.lab08 import Phases, expect_traffic, per_rank, traffic
from minidist.labkit.lab08_ranks import (
    class_of,
    zero_backward,
    zero_on_rank,
    zero_results,
    zero_stepped,
)
from minidist.labkit.ranks import run_ranks
from minidist.labkit.remote import name_of, on_student
from minidist.labkit.resident import memory_of
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.parallel.zero import OPTIMIZERS, ShardedOptimizer, values_held
from minidist.util import chunk_bounds

LIBRARY_ZERO = ("lab08_zero_step",)
HYPER = {"sgd": dict(lr=0.1, momentum=0.9), "adam": dict(lr=0.05)}
STATES = {"sgd": 1, "adam": 2}  # K, the optimiser's values per parameter


def check_zero_step(zero_class: type, world_size: int, stage: int, optimizer: str,
                    sizes: list[int], steps: int = 3, batch_per_rank: int = 4, seed: int = 0,
                    block: tuple[str, ...] = LIBRARY_ZERO) -> None:
    """``zero_class(model.parameters(), c, optimizer, stage=stage, **HYPER[optimizer])``
    for ``steps`` steps on P ranks: weights, bytes kept and bytes sent per step."""
    __tracebackhide__ = True
    what = (f"{name_of(zero_class)}.step, ZeRO-{stage}, {optimizer}, P = {world_size}, "
            f"MLP {sizes}, {steps} steps")
    is_class, sharded, _ = on_student(class_of, zero_class, "ShardedOptimizer")
    expect(is_class and sharded,
           f"{what}: build your class on ShardedOptimizer (its __init__ sets up the flat "
           "vector, the shards and the optimiser of this rank's shard)")
    rng = np.random.default_rng(seed)
    batch = world_size * batch_per_rank
    x, y = rng.normal(size=(batch * steps, sizes[0])), rng.integers(0, sizes[-1], batch * steps)
    reference = MLP(sizes, dtype=np.float64, rng=seed)
    opt = OPTIMIZERS[optimizer](reference.parameters(), **HYPER[optimizer])
    for t in range(steps):
        opt.zero_grad()
        cross_entropy(reference(Tensor(x[t * batch:(t + 1) * batch])),
                      y[t * batch:(t + 1) * batch]).backward()
        opt.step()

    def body(c: Any) -> dict[str, Any]:
        bench = on_student(zero_on_rank, zero_class, c, sizes, seed, optimizer, stage,
                           HYPER[optimizer])
        phases = Phases(c)
        for t in range(steps):
            rows = slice(t * batch + c.rank * batch_per_rank,
                         t * batch + (c.rank + 1) * batch_per_rank)
            on_student(zero_backward, bench, c, x[rows], y[rows])
            with phases(f"step {t + 1}"):
                on_student(zero_stepped, bench, c)
        return dict(on_student(zero_results, bench), sent=phases.sent)

    results, _ = run_ranks(body, world_size, what, block)
    for rank, r in enumerate(results):  # first: do the ranks agree?
        for i, got in enumerate(r["weights"]):
            expect_close(f"{what}: rank {rank}'s parameter {i} after the last step, against "
                         "rank 0's (every rank must end with the same weights: after the "
                         "update, allgather every rank's shard into the flat vector)", got,
                         results[0]["weights"][i], rtol=1e-12, atol=1e-14)
    for rank, r in enumerate(results):
        for i, (got, p) in enumerate(zip(r["weights"], reference.parameters(), strict=True)):
            expect_close(f"{what}: rank {rank}'s parameter {i} after the last step, against "
                         "one process on the global batch (DDP's weights)", got, p.data,
                         rtol=1e-9, atol=1e-12)
    n = sum(p.size for p in reference.parameters())
    expect_memory(what, results, n, world_size, stage, STATES[optimizer])
    bounds = chunk_bounds(n, world_size)
    longest = bounds[0][1] - bounds[0][0]

    def zero_traffic(scatter_check: bool, gather_check: bool) -> Any:
        def body(c: Any) -> None:
            reduce_scatter(np.zeros(n), c, check=scatter_check)
            allgather(np.zeros(longest), c, check=gather_check)
        return traffic(world_size, body)

    def allreduced(reduce_check: bool, gather_check: bool) -> Any:
        def body(c: Any) -> None:
            allreduce(np.zeros(n), c, check=reduce_check)
            allgather(np.zeros(longest), c, check=gather_check)
        return traffic(world_size, body)

    checks = list(product((True, False), repeat=2))
    options = [zero_traffic(*check) for check in checks]

    def hints() -> dict[str, Any]:  # what else the answer may have sent
        return {"an allreduce of the whole gradient (every rank gets every sum; the "
                "reduce-scatter gives rank r the sum of its shard only) and an allgather":
                [allreduced(*check) for check in checks]}
    for t in range(steps):
        expect_traffic(f"{what}: step {t + 1}", per_rank(results, f"step {t + 1}"), options,
                       f"one reduce-scatter of the {n} gradients and one allgather of the "
                       f"shards (each padded to ceil(N/P) = {longest} values) send", hints)


def expect_memory(what: str, results: list[dict[str, Any]], n: int, world_size: int,
                  stage: int, states: int) -> None:
    """Each rank's bytes kept against the model states of ZeRO-``stage`` (float64)."""
    __tracebackhide__ = True
    for rank, r in enumerate(results):
        held = values_held(n, world_size, rank, stage, states)
        got, expected = r["kept"], 8 * sum(held.values())
        shard = held["optimizer_state"] // states
        if got == expected:
            continue
        hint = (f" -- the optimisers it keeps hold {r['state']} bytes of state, "
                f"{8 * states * n} would be the whole vector's: the optimiser of the shard "
                "(self.optimizer) is all ZeRO needs: update only the shard"
                if r["state"] > 8 * held["optimizer_state"] else
                " -- that is the whole flat gradient more: stage 2 keeps only the average of "
                "its shard" if stage == 2 and got - expected == 8 * (n - shard) else
                " -- that is one flat vector of N values more: stage 1 keeps the flat "
                "gradient in self.grad_buffer" if got - expected == 8 * n else "")
        raise CheckFailed(f"{what}: after a step rank {rank} keeps {got} bytes of arrays, "
                          f"ZeRO-{stage} keeps {expected}: parameters N = {n}, gradients "
                          f"{held['gradients']}, the optimiser state of its shard K·n_r = "
                          f"{states}·{shard} (8 bytes a value){hint}")


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

