"""Hogwild against a parameter server, on the same sparse problem (Lecture 5).

Both train the matrix factorisation of ``hotspots.py`` with plain SGD,
asynchronously, W workers, each doing the same batches (seeded by worker and
step), so after the same number of updates their models can be compared:

- **Hogwild** (``parallel.hogwild``): W processes update one table in shared
  memory, without locks; an update is a read and a write of the batch's
  rows, at memory speed.
- **Parameter server** (ASP, one server): W worker processes pull the
  batch's rows from the server and push their gradient; every update crosses
  the network (here: MPI between processes) twice and waits for the server.

What is measured: updates (batches) per second over the W workers, and the
RMSE of the model after the same updates. Hogwild needs shared memory (one
machine); the parameter server is what scales past one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minidist import comm
from minidist.parallel.hogwild import run_hogwild
from minidist.parallel.ps.hotspots import (
    assemble,
    batch_keys,
    batch_rows,
    mf_gradient,
    mf_layout,
    ratings,
    rmse,
    train_mf,
)

PROBLEM = dict(num_users=4000, num_items=4000, count=50_000, dim=8)


@dataclass
class RaceResult:
    """One contender: updates per second over all workers, and its model's RMSE."""

    name: str
    updates: int
    seconds: float
    rmse: float

    @property
    def updates_per_second(self) -> float:
        return self.updates / self.seconds


def hogwild_worker(shared, rank: int, workers: int, sync, steps: int, batch: int, lr: float,
                   seed: int) -> None:
    """One Hogwild process: ``steps`` SGD updates of the rows its batches touch."""
    data = ratings(**PROBLEM, seed=seed)
    layout, dim = mf_layout(data, PROBLEM["dim"]), PROBLEM["dim"]
    table = shared["values"]
    sync.begin(0)
    loss = 0.0
    for t in range(steps):
        rows = batch_rows(data, seed, rank, t, batch)
        keys = batch_keys(data, layout, rows)
        index = layout.value_index(keys)
        grad, loss = mf_gradient(data, layout, rows, keys, table[index], dim)
        table[index] -= lr * grad  # no lock: another process may be writing these rows
    sync.report(0, loss)


def race_hogwild(workers: int = 2, steps: int = 200, batch: int = 256, lr: float = 0.5,
                 seed: int = 0) -> RaceResult:
    data = ratings(**PROBLEM, seed=seed)
    layout = mf_layout(data, PROBLEM["dim"])
    arrays = {"values": np.random.default_rng(seed + 1).normal(0, 0.1, layout.num_values)}
    run = run_hogwild(hogwild_worker, arrays, workers, epochs=1, written=["values"],
                      args=(steps, batch, lr, seed))
    return RaceResult("hogwild", workers * steps, run.seconds[0],
                      rmse(data, layout, arrays["values"], PROBLEM["dim"]))


def _ps_rank(c, steps: int, batch: int, lr: float, seed: int):
    data = ratings(**PROBLEM, seed=seed)
    return train_mf(c, data, dim=PROBLEM["dim"], steps=steps, batch=batch, lr=lr,
                    consistency="asp", seed=seed)


def race_parameter_server(workers: int = 2, steps: int = 200, batch: int = 256,
                          lr: float = 0.5, seed: int = 0, backend: str = "mpi") -> RaceResult:
    """One server and ``workers`` workers, as MPI processes (or in-process ranks)."""
    results = comm.launch(_ps_rank, workers + 1, args=(steps, batch, lr, seed),
                          backend=backend, timeout=600)
    data = ratings(**PROBLEM, seed=seed)
    layout = mf_layout(data, PROBLEM["dim"])
    seconds = max(r.seconds for r in results if r.losses is not None)
    return RaceResult("parameter server", workers * steps, seconds,
                      rmse(data, layout, assemble(results, layout), PROBLEM["dim"]))


def race(workers: int = 2, steps: int = 200, batch: int = 256, lr: float = 0.5,
         seed: int = 0) -> tuple[float, list[RaceResult]]:
    """(the untrained model's RMSE, [Hogwild's result, the parameter server's])."""
    data = ratings(**PROBLEM, seed=seed)
    layout = mf_layout(data, PROBLEM["dim"])
    untrained = np.random.default_rng(seed + 1).normal(0, 0.1, layout.num_values)
    return rmse(data, layout, untrained, PROBLEM["dim"]), [
        race_hogwild(workers, steps, batch, lr, seed),
        race_parameter_server(workers, steps, batch, lr, seed)]
