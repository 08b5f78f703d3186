"""Data parallelism for GloVe: the non-zeros split over P ranks, only touched rows exchanged.

Every rank holds a whole replica of the model. Each global batch of P * B
records is cut into P pieces; rank r computes the gradients of its piece.
Those touch a few thousand rows at most, however large the vocabulary, so
the ranks exchange only those rows, as (row id, summed gradient) pairs,
instead of allreducing the two V x (d + 1) tables, almost all zeros. Each
rank then adds up what it received, in rank order (the same sum on every
rank), and takes the same AdaGrad step on the same rows: the replicas stay
identical, and the run is one process's run with batches of P * B records.

One global batch, on every rank:

1. my piece of the batch -> summed gradients of the U_r rows I touched;
2. allgather a header per rank: how many word and context rows, and my cost;
3. allgather the rows themselves, [id, gradient] padded to the largest U;
4. sum per row over all ranks (``glove.sum_rows``), one AdaGrad step per row.

Cost per global batch and rank: O(B d) arithmetic; the exchange moves
(P - 1) * U_max * (d + 2) floats per rank (ring allgather, P - 1 rounds),
where a ring allreduce of both dense tables would move 2 (P - 1) / P * 2V(d + 1):
sparse wins whenever the touched rows are fewer than ~2V / P.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.collectives import allgather
from minidist.comm.communicator import Communicator
from minidist.models.glove import (
    ETA,
    GloVe,
    Records,
    adagrad_rows,
    batch_gradients,
    epoch_order,
    sum_rows,
)


def pack_rows(ids: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """Rows [id, gradient...] in one float64 array (ids below 2^53 are exact)."""
    return np.concatenate((ids[:, None].astype(np.float64), grads), axis=1)


def exchange_gradients(comm: Communicator, model: GloVe, piece: Records
                       ) -> tuple[float, tuple[np.ndarray, np.ndarray], tuple[np.ndarray,
                                                                            np.ndarray]]:
    """Every rank's touched rows, summed: (batch cost, (words, grads), (contexts, grads))."""
    grads = batch_gradients(model, piece)                                   # 1.
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
    return (float(headers[:, 2].sum()),                                     # 4.
            sum_rows(words[:, 0].astype(np.int64), words[:, 1:]),
            sum_rows(contexts[:, 0].astype(np.int64), contexts[:, 1:]))


def train_glove_ddp(comm: Communicator, model: GloVe, records: Records, epochs: int,
              batch_size: int = 4096, seed: int = 0,
              eta: float = ETA) -> tuple[GloVe | None, list[float]]:
    """``glove.train`` with each batch of ``comm.size * batch_size`` records split over ranks.

    Every rank starts from the same ``model`` and records. Returns, on rank
    0, the trained model (None elsewhere: the replicas are equal) and,
    everywhere, the cost of each epoch.
    """
    model, size = model.copy(), comm.size
    costs = []
    for epoch in range(epochs):
        shuffled = records.take(epoch_order(len(records), seed, epoch))
        total = 0.0
        for batch in shuffled.batches(size * batch_size):
            piece = batch.take(np.array_split(np.arange(len(batch)), size)[comm.rank])
            cost, (words, word_grad), (contexts, context_grad) = \
                exchange_gradients(comm, model, piece)
            adagrad_rows(model.word, model.word_gradsq, words, word_grad, eta)
            adagrad_rows(model.context, model.context_gradsq, contexts, context_grad, eta)
            total += cost
        costs.append(total / max(len(records), 1))
    return (model if comm.rank == 0 else None), costs
