"""Operation parallelism for GloVe (Lecture 6; Lab 5, Task 4): every vector's dimensions
split over P ranks.

A dot product is a sum over dimensions, w_i . w~_j = sum_k w_ik w~_jk. Give
rank r the columns lo_r:hi_r = ``chunk_bounds(d, P)[r]`` of both tables (and
of their AdaGrad sums): it can compute its piece of every dot product of a
batch, and one allreduce of B numbers (one per record, not one per
dimension) makes the whole dot products known on every rank. From there
each rank has all it needs: diff and fdiff are the same everywhere, and the
gradient of its own columns, fdiff * w~_j[lo:hi], involves only its own
columns. The vectors themselves never travel. The biases are small: every
rank keeps them whole and applies the same update to them.

Cost per batch: O(B d / P) arithmetic per rank plus one allreduce of B
floats (ring: 2(P-1) rounds, 2(P-1)/P * 8B bytes per rank), however large d
is. Lecture 6's warning shows here: every batch waits for the slowest rank,
and when d / P is small the messages' latency dominates the saved work.

Equal to one process: only the order in which the dot product's terms are
added differs (piece by piece, then the pieces), which changes the last bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from minidist.comm import Communicator, allreduce
from minidist.comm.tags import Tag
from minidist.glove.gradients import row_gradients
from minidist.glove.model import ETA, GloVe, Records, require_host
from minidist.glove.training import Strategy, apply_gradients, fit
from minidist.util import chunk_bounds
from minidist.util.answers import lab_answer


def shard(model: GloVe, lo: int, hi: int) -> GloVe:
    """Columns lo:hi of every table, and the bias column, as a GloVe of dimension hi - lo."""
    return GloVe(*(np.ascontiguousarray(np.concatenate((a[:, lo:hi], a[:, -1:]), axis=1))
                   for a in model.arrays().values()))


@lab_answer("lab05_sharded_dots")
def sharded_step(comm: Communicator, local: GloVe, batch: Records, eta: float = ETA,
                 algorithm: str = "ring") -> float:
    """One batch on this rank's columns; returns the batch's cost J / 2.

    1. gather the batch's rows of my columns (and the biases);
    2. my partial dot products: B numbers, O(B d / P) work;
    3. allreduce the partial sums: the whole dot products, on every rank;
    4. diff, fdiff, and the AdaGrad update of my columns and of the biases.
    """
    w, c = local.word[batch.row], local.context[batch.col]                  # 1.
    partial = np.einsum("bk,bk->b", w[:, :-1], c[:, :-1])                   # 2.
    # communication: my B partial dot products out, the B whole ones back (every rank has
    # the same batch, so the agreement check, one more round of messages, is skipped)
    dot = allreduce(partial, comm, op="sum", algorithm=algorithm, check=False)  # 3.
    diff = dot + w[:, -1] + c[:, -1] - batch.log_x
    grads = row_gradients(batch, w, c, diff)                                # 4.
    apply_gradients(local, grads, eta)
    return grads.cost


def gather_columns(comm: Communicator, local: GloVe,
                   bounds: list[tuple[int, int]]) -> GloVe | None:
    """Rank 0 puts the ranks' columns back together (biases: its own copy)."""
    if comm.rank != 0:
        for array in local.arrays().values():
            # communication: my columns of this table to rank 0
            comm.send(np.ascontiguousarray(array[:, :-1]), 0, Tag.GLOVE_GATHER)
        return None
    tables = []
    for array in local.arrays().values():
        table = np.empty((len(array), bounds[-1][1] + 1))
        table[:, -1] = array[:, -1]
        table[:, slice(*bounds[0])] = array[:, :-1]
        for source, (lo, hi) in enumerate(bounds[1:], start=1):
            # communication: rank `source`'s columns lo:hi of this table
            table[:, lo:hi] = comm.recv(np.empty((len(array), hi - lo)), source,
                                        Tag.GLOVE_GATHER)
        tables.append(table)
    return GloVe(*tables)


@dataclass
class Sharded(Strategy):
    """Rank r trains columns ``chunk_bounds(d, P)[r]`` of every table on every batch."""

    comm: Communicator
    algorithm: str = "ring"
    bounds: list[tuple[int, int]] = field(default_factory=list, init=False)

    def start(self, model: GloVe) -> GloVe:
        require_host("the sharded GloVe trainer", model)
        self.bounds = chunk_bounds(model.dim, self.comm.size)
        return shard(model, *self.bounds[self.comm.rank])

    def step(self, model: GloVe, batch: Records, eta: float) -> float:
        return sharded_step(self.comm, model, batch, eta, self.algorithm)

    def finish(self, model: GloVe) -> GloVe | None:
        return gather_columns(self.comm, model, self.bounds)


@lab_answer("lab05_sharded_dots")
def train_glove_sharded(comm: Communicator, model: GloVe, records: Records, epochs: int,
                        batch_size: int = 4096, seed: int = 0, eta: float = ETA,
                        algorithm: str = "ring") -> tuple[GloVe | None, list[float]]:
    """``glove.train`` with the dimensions split over the ranks of ``comm``.

    Every rank starts from the same ``model`` and records. Returns, on rank
    0, the whole trained model (None elsewhere) and, everywhere, the cost of
    each epoch.
    """
    return fit(Sharded(comm, algorithm), model, records, epochs, batch_size, eta, seed)
