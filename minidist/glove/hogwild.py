"""Hogwild! for GloVe (Lab 5, Task 5): P processes train one shared model, without locks.

The word and context tables, their AdaGrad sums and the training records
sit once in shared memory (``minidist.parallel.hogwild`` has the machinery:
shared blocks, worker processes, cleanup). Each worker runs the one
training loop, ``fit``, with the ``HogwildWorker`` strategy:

1. the workers meet at a barrier: the epoch starts;
2. every worker draws the same shuffle (seed, epoch) and takes its block,
   ``chunk_bounds(nnz, P)[k]``: P disjoint blocks, one pass together;
3. it trains on its block in mini-batches with the one-process ``step``,
   writing straight into the shared tables while the others do the same;
4. it reports its share of the epoch's cost; the parent adds the P shares.

Cost per epoch: nnz / P records per worker, no messages but one report per
worker; the only contention is on memory bandwidth and on rows touched by
two workers at once. With workers=1 the run is exactly ``train``'s.
(glove.c runs Hogwild with threads; ``per_record.train_records(threads=T)``
does too, its compiled loop releasing the interpreter lock. This file is
the lesson on processes and shared memory.) CPU only: the shared blocks are
host memory, so a model or records on a device are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from minidist.glove.model import ETA, GloVe, Records, check_ids, require_host
from minidist.glove.training import Strategy, fit
from minidist.parallel.hogwild import EpochSync, HogwildRun, SharedArrays, run_hogwild
from minidist.util import chunk_bounds
from minidist.util.values import positive

MODEL_FIELDS = ("word", "context", "word_gradsq", "context_gradsq")
RECORD_FIELDS = ("row", "col", "weight", "log_x")


@dataclass
class HogwildWorker(Strategy):
    """Worker ``rank`` of ``workers``: its block of every epoch, straight into shared memory."""

    rank: int
    workers: int
    sync: EpochSync

    def begin_epoch(self, epoch: int) -> None:
        self.sync.begin(epoch)

    def part(self, order: np.ndarray) -> np.ndarray:
        lo, hi = chunk_bounds(len(order), self.workers)[self.rank]
        return order[lo:hi]

    def end_epoch(self, epoch: int, cost: float) -> float:
        self.sync.report(epoch, cost)
        return cost


def train_worker(shared: SharedArrays, rank: int, workers: int, sync: EpochSync, epochs: int,
                 batch_size: int, eta: float, seed: int) -> None:
    """One worker process: the training loop on views of the shared arrays."""
    model = GloVe(*(shared[name] for name in MODEL_FIELDS))
    records = Records(*(shared[name] for name in RECORD_FIELDS))
    fit(HogwildWorker(rank, workers, sync), model, records, epochs, batch_size, eta, seed)


def train_hogwild(model: GloVe, records: Records, workers: int = 2, epochs: int = 1,
                  batch_size: int = 4096, eta: float = ETA, seed: int = 0,
                  timeout: float = 300.0,
                  on_epoch: Callable[[int, float], None] | None = None) -> HogwildRun:
    """Train ``model`` in place with ``workers`` lock-free processes; returns costs and times.

    An epoch's time runs from the first worker's start to the last one's end.
    ``on_epoch(epoch, cost)`` is called after each epoch. The whole run must
    end within ``timeout`` seconds, else it is stopped and TimeoutError raised.
    CPU only: the workers share host memory.
    """
    require_host("train_hogwild", model, records)
    check_ids(records.row, records.col, len(model.word), "train_hogwild")  # before any worker
    eta = positive("eta", eta)
    arrays = {**model.arrays(), **{name: getattr(records, name) for name in RECORD_FIELDS}}
    return run_hogwild(train_worker, arrays, workers, epochs, written=MODEL_FIELDS,
                       args=(epochs, batch_size, eta, seed), timeout=timeout,
                       on_epoch=on_epoch)
