"""Lab 8, Task 4's claims on bytes: what a ZeRO step keeps, and what it sends.

``check_zero_step`` (``lab08_zero.py``) makes them from each rank's results:

- ``expect_memory`` (claim 3): the bytes of arrays a rank keeps after a step
  are ZeRO-``stage``'s model states (``zero.values_held``), with a hint
  naming what an answer that keeps more kept: another float dtype, the
  whole vector's optimiser state, the whole flat gradient;
- ``expect_zero_traffic`` (claim 4): each step sends what one
  ``reduce_scatter`` of the N gradients and one ``allgather`` of the padded
  shards send, in the model's dtype, with or without their agreement
  checks; an allreduce, or float64 buffers in a float32 model, are named.
"""

from __future__ import annotations

from itertools import product
from typing import Any

import numpy as np

from minidist.comm import allgather, allreduce, reduce_scatter
from minidist.labkit.checks import CheckFailed
from minidist.labkit.lab08 import expect_traffic, per_rank, traffic
from minidist.parallel.zero import values_held
from minidist.util import chunk_bounds

FLOAT64 = np.dtype(np.float64)


def expect_zero_traffic(what: str, results: list[dict[str, Any]], n: int, world_size: int,
                        steps: int, dtype: np.dtype) -> None:
    """Each step: one reduce-scatter of the N gradients and one allgather of the padded
    shards, in the model's dtype, with or without their agreement checks."""
    __tracebackhide__ = True
    bounds = chunk_bounds(n, world_size)
    longest = bounds[0][1] - bounds[0][0]

    def sent(first: Any, scatter: Any, gather: Any, checks: tuple[bool, bool]) -> Any:
        def body(c: Any) -> None:
            first(np.zeros(n, scatter), c, check=checks[0])
            allgather(np.zeros(longest, gather), c, check=checks[1])
        return traffic(world_size, body)

    checks = list(product((True, False), repeat=2))
    options = [sent(reduce_scatter, dtype, dtype, check) for check in checks]

    def hints() -> dict[str, Any]:  # what else the answer may have sent
        named = {"an allreduce of the whole gradient (every rank gets every sum; the "
                 "reduce-scatter gives rank r the sum of its shard only) and an allgather":
                 [sent(allreduce, dtype, dtype, check) for check in checks]}
        if dtype != np.float64:
            named[f"a reduce-scatter and an allgather with float64 values, where the model's "
                  f"are {dtype}: make the flat gradient and the padded shard in "
                  "self.flat.dtype"] = [
                sent(reduce_scatter, a, b, check) for check in checks
                for a, b in product((dtype, np.float64), repeat=2) if (a, b) != (dtype, dtype)]
        return named
    for t in range(steps):
        expect_traffic(f"{what}: step {t + 1}", per_rank(results, f"step {t + 1}"), options,
                       f"one reduce-scatter of the {n} gradients and one allgather of the "
                       f"shards (each padded to ceil(N/P) = {longest} values, {dtype}) send",
                       hints)


def expect_memory(what: str, results: list[dict[str, Any]], n: int, world_size: int,
                  stage: int, states: int, dtype: np.dtype = FLOAT64) -> None:
    """Each rank's bytes kept against the model states of ZeRO-``stage`` (of ``dtype``)."""
    __tracebackhide__ = True
    b = dtype.itemsize
    for rank, r in enumerate(results):
        held = values_held(n, world_size, rank, stage, states)
        got, expected = r["kept"], b * sum(held.values())
        shard = held["optimizer_state"] // states
        if got == expected:
            continue
        hint = (f" -- {r['other']} bytes of it are in arrays of another float dtype than the "
                f"model's {dtype}: make the flat gradient and the shard's gradient in "
                "self.flat.dtype" if r.get("other") else
                f" -- the optimisers it keeps hold {r['state']} bytes of state, "
                f"{b * states * n} would be the whole vector's: the optimiser of the shard "
                "(self.optimizer) is all ZeRO needs: update only the shard"
                if r["state"] > b * held["optimizer_state"] else
                " -- that is the whole flat gradient more: stage 2 keeps only the average of "
                "its shard" if stage == 2 and got - expected == b * (n - shard) else
                " -- that is one flat vector of N values more: stage 1 keeps the flat "
                "gradient in self.grad_buffer" if stage == 1 and got - expected == b * n
                else "")
        raise CheckFailed(f"{what}: after a step rank {rank} keeps {got} bytes of arrays, "
                          f"ZeRO-{stage} keeps {expected}: parameters N = {n}, gradients "
                          f"{held['gradients']}, the optimiser state of its shard K·n_r = "
                          f"{states}·{shard} ({b} bytes a value){hint}")
