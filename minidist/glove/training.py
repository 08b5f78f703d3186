"""Training GloVe: the update of one batch, and one loop for every strategy.

The update (``step``) is Lab 5's Tasks 2 and 3 in a row: the gradients of
the rows a batch touched, then glove.c's AdaGrad on those rows. glove.c
updates after every record; here the records come in batches of ~4096, each
done with a few whole-array operations (``vectorised`` says how and when
that differs from glove.c).

The loop (``fit``) is the same for one process and for P workers; a
*strategy* says what differs:

    for every epoch:
        1. every worker draws the same shuffle of the records, from (seed, epoch)
        2. the strategy takes this worker's part of it      (all of it; Hogwild: block k of P)
        3. batch after batch, the strategy's step           (one process: ``step``)
        4. the epoch's cost: glove.c's J / 2 per record, over all the records

``Strategy()`` itself is the one-process run. The parallel ones, each in its
own file: ``Sharded`` (every vector's dimensions split over the ranks),
``SparseDDP`` (every batch split over the ranks, touched rows exchanged) and
``HogwildWorker`` (processes updating one shared model without locks).

Device: ``step`` computes where the model's tables are (numpy, or cupy on a
GPU). ``fit`` puts the records there once, if they are not, and each epoch's
shuffle once; a batch is a slice of them, already in place. The costs are
read back once an epoch. The parallel strategies run on the CPU only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from minidist import backend
from minidist.glove.gradients import SparseGradients, batch_gradients
from minidist.glove.model import ETA, GloVe, Records, adagrad_columns, check_ids
from minidist.optim.adagrad import adagrad_rows
from minidist.util import epoch_order  # the shuffle of an epoch, the same in every process
from minidist.util.answers import lab_answer
from minidist.util.values import positive


@lab_answer("lab05_adagrad")
def adagrad_step(table: Any, gradsq: Any, rows: Any, grad: Any, eta: float = ETA) -> None:
    """glove.c's AdaGrad on ``rows`` of one table [w_i, b_i], in place (Task 3). O(rows d).

    Per column as the current glove.c does it (``adagrad_columns``): the
    vector's gradient clipped to +-100 and scaled by eta, the bias's taken as
    it is; then theta -= s / sqrt(G) and G += s^2."""
    rates, clips = columns_on(backend.xp_of(table), table.shape[1] - 1, eta)
    adagrad_rows(table, gradsq, rows, grad, rates, clip=clips)


@lru_cache(maxsize=32)
def columns_on(xp: ModuleType, dim: int, eta: float) -> tuple[Any, Any]:
    """``adagrad_columns`` on ``xp``'s device, made once per (device, d, eta), not per step."""
    return tuple(xp.asarray(a) for a in adagrad_columns(dim, eta))  # type: ignore[return-value]


def apply_gradients(model: GloVe, grads: SparseGradients, eta: float = ETA) -> None:
    """glove.c's AdaGrad on every row the batch touched, in both tables. O(U d)."""
    adagrad_step(model.word, model.word_gradsq, grads.words, grads.word_grad, eta)
    adagrad_step(model.context, model.context_gradsq, grads.contexts, grads.context_grad, eta)


def step(model: GloVe, batch: Records, eta: float = ETA) -> float:
    """Update ``model`` on one batch; returns the batch's cost J / 2 before the update.

    Cost: O(B d) arithmetic and O(B log B) for B records; ~2(B + U)(d + 1) random
    row reads and writes for the U distinct rows touched (these dominate).
    """
    grads = batch_gradients(model, batch)    # 1. the touched rows' gradients (Task 2)
    apply_gradients(model, grads, eta)       # 2. AdaGrad on those rows (Task 3)
    return grads.cost


class Strategy:
    """How one worker takes part in training. As it is: one process, the whole model."""

    def start(self, model: GloVe) -> GloVe:
        """What this worker trains: the model itself (a copy, a shard: see the others)."""
        return model

    def part(self, order: np.ndarray) -> np.ndarray:
        """This worker's records of the epoch, as positions in the shuffled order."""
        return order

    def batch_records(self, batch_size: int) -> int:
        """How many of its records one ``step`` takes."""
        return batch_size

    def begin_epoch(self, epoch: int) -> None:
        """Called before each epoch (Hogwild's workers wait for each other here)."""

    def step(self, model: GloVe, batch: Records, eta: float) -> float:
        """Update on one batch; returns the cost J / 2 of the batch, over all workers."""
        return step(model, batch, eta)

    def end_epoch(self, epoch: int, cost: float) -> float:
        """The epoch's cost per record, from this worker's share of it."""
        return cost

    def finish(self, model: GloVe) -> GloVe | None:
        """The trained model (None on ranks that do not hold it whole)."""
        return model


def run_epoch(strategy: Strategy, model: GloVe, batches: Iterable[Records], eta: float,
              on_batch: Callable[[int], None] | None = None) -> float:
    """The strategy's step on each batch; returns the sum of the batches' costs."""
    total = 0.0
    for batch in batches:
        total += strategy.step(model, batch, eta)  # on a device: summed there
        if on_batch is not None:
            on_batch(len(batch))
    return float(total)  # the epoch's one copy of its cost to the host


def fit(strategy: Strategy, model: GloVe, records: Records, epochs: int,
        batch_size: int = 4096, eta: float = ETA, seed: int = 0,
        on_batch: Callable[[int], None] | None = None,
        on_epoch: Callable[[int, float], None] | None = None
        ) -> tuple[GloVe | None, list[float]]:
    """The training loop: ``epochs`` passes over ``records`` with ``strategy``.

    Returns the strategy's trained model and glove.c's cost of each epoch.
    ``on_batch(n)`` is called after each batch of n records, ``on_epoch(epoch,
    cost)`` after each epoch. ``eta`` must be a finite number > 0.
    """
    check_ids(records.row, records.col, len(model.word), "the records")  # rows of the model
    eta = positive("eta", eta)  # NaN would make every table NaN, and the costs 0 after
    local = strategy.start(model)
    records = records.to(backend.xp_of(local.word))  # where the model is, once
    costs = []
    for epoch in range(epochs):
        strategy.begin_epoch(epoch)
        order = epoch_order(len(records), seed, epoch)                        # 1.
        mine = records.take(strategy.part(order))     # 2. (on a device: one gather)
        batches = mine.batches(strategy.batch_records(batch_size))
        total = run_epoch(strategy, local, batches, eta, on_batch)            # 3.
        costs.append(strategy.end_epoch(epoch, total / max(len(records), 1)))  # 4.
        if on_epoch is not None:
            on_epoch(epoch, costs[-1])
    return strategy.finish(local), costs


def train(model: GloVe, records: Records, epochs: int, batch_size: int = 4096,
          eta: float = ETA, seed: int = 0, on_batch: Callable[[int], None] | None = None,
          on_epoch: Callable[[int, float], None] | None = None) -> list[float]:
    """Train ``model`` in place, in one process; returns the cost of each epoch.

    The run that every parallel strategy is compared with.
    """
    return fit(Strategy(), model, records, epochs, batch_size, eta, seed, on_batch,
               on_epoch)[1]


def train_epoch(model: GloVe, records: Records, rng: np.random.Generator | None,
                batch_size: int = 4096, eta: float = ETA,
                on_batch: Callable[[int], None] | None = None) -> float:
    """One pass over the records in place, shuffled by ``rng`` (in order if None);
    returns glove.c's cost: each batch's J / 2 just before its update, summed, per record."""
    eta = positive("eta", eta)
    records = records.to(backend.xp_of(model.word))  # where the model is, once
    total = run_epoch(Strategy(), model, records.batches(batch_size, rng), eta, on_batch)
    return total / max(len(records), 1)
