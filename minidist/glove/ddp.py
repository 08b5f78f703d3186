"""Data parallelism for GloVe: every batch split over P ranks, only touched rows exchanged.

Every rank holds a whole replica of the model. Each global batch of P * B
records is cut into P pieces (``chunk_bounds``); rank r computes the
gradients of its piece. Those touch a few thousand rows at most, however
large the vocabulary, so the ranks exchange only those rows, as (row id,
summed gradient) pairs, instead of allreducing the two V x (d + 1) tables,
almost all zeros. Each rank then adds up what it received, in rank order
(the same sum on every rank), and takes the same AdaGrad step on the same
rows: the replicas stay identical, and the run is one process's run with
batches of P * B records.

Cost per global batch and rank: O(B d) arithmetic; the exchange moves
(P - 1) * U_max * (d + 2) floats per rank (ring allgather, P - 1 rounds),
where a ring allreduce of both dense tables would move 2 (P - 1) / P * 2V(d + 1):
sparse wins whenever the touched rows are fewer than ~2V / P.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minidist.comm import Communicator, allgather
from minidist.glove.gradients import SparseGradients, batch_gradients
from minidist.glove.model import ETA, GloVe, Records, require_host
from minidist.glove.training import Strategy, apply_gradients, fit
from minidist.glove.vectorised import sum_rows
from minidist.util import chunk_bounds


def pack_rows(ids: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """Rows [id, gradient...] in one float64 array (ids below 2^53 are exact)."""
    return np.concatenate((ids[:, None].astype(np.float64), grads), axis=1)


def sparse_ddp_step(comm: Communicator, model: GloVe, batch: Records, eta: float = ETA) -> float:
    """One global batch, the same call on every rank; returns its cost J / 2.

    1. my piece of the batch -> summed gradients of the U_r rows I touched;
    2. allgather a header per rank: how many word and context rows, and my cost;
    3. allgather the rows themselves, [id, gradient] padded to the largest U;
    4. sum per row over all ranks, one AdaGrad step per row.
    """
    lo, hi = chunk_bounds(len(batch), comm.size)[comm.rank]
    grads = batch_gradients(model, batch.take(slice(lo, hi)))               # 1.
    mine = np.concatenate((pack_rows(grads.words, grads.word_grad),
                           pack_rows(grads.contexts, grads.context_grad)))
    header = np.array([len(grads.words), len(grads.contexts), grads.cost])
    # communication: (number of word rows, of context rows, cost) from every rank
    headers = allgather(header, comm)                                       # 2.
    padded = np.zeros((int(headers[:, :2].sum(axis=1).max()), mine.shape[1]))
    padded[:len(mine)] = mine
    # communication: every rank's touched rows [id, gradient], padded to the longest
    rows = allgather(padded, comm)                                          # 3.
    words, contexts = [], []
    for (num_words, num_contexts, _), block in zip(headers, rows, strict=True):
        words.append(block[:int(num_words)])
        contexts.append(block[int(num_words):int(num_words + num_contexts)])
    words, contexts = np.concatenate(words), np.concatenate(contexts)
    total = SparseGradients(*sum_rows(words[:, 0].astype(np.int64), words[:, 1:]),  # 4.
                            *sum_rows(contexts[:, 0].astype(np.int64), contexts[:, 1:]),
                            float(headers[:, 2].sum()))
    apply_gradients(model, total, eta)
    return total.cost


@dataclass
class SparseDDP(Strategy):
    """Every rank a replica; each batch of P * B records split over the ranks."""

    comm: Communicator

    def start(self, model: GloVe) -> GloVe:
        require_host("the sparse-DDP GloVe trainer", model)
        return model.copy()  # the ranks of one process must not share the caller's model

    def batch_records(self, batch_size: int) -> int:
        return self.comm.size * batch_size

    def step(self, model: GloVe, batch: Records, eta: float) -> float:
        return sparse_ddp_step(self.comm, model, batch, eta)

    def finish(self, model: GloVe) -> GloVe | None:
        return model if self.comm.rank == 0 else None  # the replicas are equal


def train_glove_ddp(comm: Communicator, model: GloVe, records: Records, epochs: int,
                    batch_size: int = 4096, seed: int = 0,
                    eta: float = ETA) -> tuple[GloVe | None, list[float]]:
    """``glove.train`` with each batch of ``comm.size * batch_size`` records split over ranks.

    Every rank starts from the same ``model`` and records. Returns, on rank
    0, the trained model (None elsewhere: the replicas are equal) and,
    everywhere, the cost of each epoch.
    """
    return fit(SparseDDP(comm), model, records, epochs, batch_size, eta, seed)
