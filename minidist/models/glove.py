"""GloVe (Pennington, Socher & Manning, 2014): word vectors from co-occurrence counts.

Every word i has a vector w_i and a bias b_i, and, as a context, a second
vector w~_i and bias b~_i. Training fits their dot products to the logarithm
of the co-occurrence counts X_ij, over the non-zero counts only:

    J = sum_ij f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2
    f(x) = min(1, (x / x_max)^alpha)          alpha = 0.75, x_max = 100

f gives rare, noisy pairs little weight and caps frequent ones at 1.

Gradients. With diff = w_i . w~_j + b_i + b~_j - log X_ij and fdiff = f * diff,
one record's term has gradient 2 fdiff w~_j for w_i, 2 fdiff w_i for w~_j and
2 fdiff for both biases. The reference C code (glove.c) drops the 2: it
differentiates J / 2 (it also reports the cost 0.5 f diff^2). We stay faithful
to it: ``batch_gradients`` returns the gradients of J / 2, and the cost printed
per epoch is J / 2 divided by the number of records. Once AdaGrad's sums
outgrow their start at 1 the factor cancels (g / sqrt(sum g^2) ignores g's
scale); before, it would double the first steps.

AdaGrad as glove.c does it, for every number theta of the model, with g its
gradient and eta = 0.05:

    theta -= eta * g / sqrt(G)      then      G += (eta * g)^2

G starts at 1 (so the first step is exactly eta * g), it accumulates the
squares of the *scaled* gradients, and the step uses G before this
gradient is added. The biases are updated the same way. (Later glove.c
versions also clip each gradient to +-100; not done here.)

Mini-batches. glove.c updates after every record. Here the non-zeros are
shuffled each epoch (seeded) and cut into batches of ~4096 records; a batch
is processed with a few numpy operations over whole arrays: gather the rows
it touches, compute every record's fdiff, then sum the gradients per row
(a word seen k times in a batch gets the sum of its k gradients) and take one
AdaGrad step per touched row. Where no row repeats inside a batch this is
exactly glove.c's sequence of updates (with batch_size=1 it always is); a
word repeated in a batch takes one step with the summed gradient where
glove.c would take k smaller ones. The sums are made by sorting the row ids
(np.add.at, the obvious tool, measured twice as slow).

Storage, as in glove.c: a table row is [w_i, b_i] (the bias is the last
column), so a gather fetches a word's vector and bias at once. The output
vectors are w + w~ (the two are trained symmetrically; their sum is a little
better than either). ``save_vectors`` writes the GloVe text format, one
``word x1 ... xd`` line per word, which other tools read.

Cost per batch of B records, dimension d, U distinct rows: O(B d) arithmetic,
O(B log B) to sort the ids, and ~2(B + U)(d + 1) random row reads and
writes: these gathers, sorts and scatters take most of the time.

A second path computes the same J / 2 with minidist's autograd
(``autograd_loss``) and applies the same update (``ReferenceAdaGrad``): it is
the lab's version, slower, and the tests check that both agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.optim.optimizer import Optimizer

X_MAX, ALPHA, ETA = 100.0, 0.75, 0.05


def weighting(x: np.ndarray, x_max: float = X_MAX, alpha: float = ALPHA) -> np.ndarray:
    """f(x) = min(1, (x / x_max)^alpha), elementwise."""
    return np.minimum(1.0, (np.asarray(x, dtype=np.float64) / x_max) ** alpha)


@dataclass
class Records:
    """The non-zeros X_ij as training records, with f(X_ij) and log X_ij precomputed."""

    row: np.ndarray      # int, word ids i
    col: np.ndarray      # int, context ids j
    weight: np.ndarray   # f(X_ij)
    log_x: np.ndarray    # log X_ij

    @classmethod
    def from_counts(cls, row: Any, col: Any, val: Any, x_max: float = X_MAX,
                    alpha: float = ALPHA) -> Records:
        val = np.asarray(val, dtype=np.float64)
        return cls(np.asarray(row, dtype=np.int64), np.asarray(col, dtype=np.int64),
                   weighting(val, x_max, alpha), np.log(val))

    def __len__(self) -> int:
        return len(self.row)

    def take(self, index: Any) -> Records:
        return Records(self.row[index], self.col[index], self.weight[index], self.log_x[index])

    def batches(self, batch_size: int, rng: np.random.Generator | None = None
                ) -> Iterator[Records]:
        """Consecutive batches, after a shuffle when ``rng`` is given."""
        records = self if rng is None else self.take(rng.permutation(len(self)))
        for start in range(0, len(records), batch_size):
            yield records.take(slice(start, start + batch_size))


@dataclass
class GloVe:
    """Word and context tables (one row [vector, bias] per word) and their AdaGrad sums."""

    word: np.ndarray          # (V, d + 1)
    context: np.ndarray       # (V, d + 1)
    word_gradsq: np.ndarray   # (V, d + 1), starts at 1
    context_gradsq: np.ndarray

    @classmethod
    def create(cls, vocab_size: int, dim: int, seed: int = 0) -> GloVe:
        """glove.c's start: every number uniform in [-0.5, 0.5) / d, every G at 1."""
        rng = np.random.default_rng(seed)
        word, context = (rng.random((2, vocab_size, dim + 1)) - 0.5) / dim
        return cls(word, context, np.ones_like(word), np.ones_like(context))

    @property
    def dim(self) -> int:
        return self.word.shape[1] - 1

    def arrays(self) -> dict[str, np.ndarray]:
        return {"word": self.word, "context": self.context,
                "word_gradsq": self.word_gradsq, "context_gradsq": self.context_gradsq}

    def copy(self) -> GloVe:
        return GloVe(**{name: a.copy() for name, a in self.arrays().items()})

    def vectors(self) -> np.ndarray:
        """The output vectors w + w~, shape (V, d)."""
        return self.word[:, :-1] + self.context[:, :-1]


def gather_residuals(model: GloVe, batch: Records) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch's rows [w_i, b_i] and [w~_j, b~_j] (copies), and every record's
    diff = w_i . w~_j + b_i + b~_j - log X_ij."""
    w, c = model.word[batch.row], model.context[batch.col]
    diff = np.einsum("bk,bk->b", w[:, :-1], c[:, :-1]) + w[:, -1] + c[:, -1] - batch.log_x
    return w, c, diff


def loss(model: GloVe, records: Records) -> float:
    """J = sum f(X_ij) diff^2 over the records (the paper's loss, twice glove.c's cost)."""
    diff = gather_residuals(model, records)[2]
    return float(records.weight @ (diff * diff))


def sum_rows(ids: np.ndarray, grads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ids and, per id, the sum of its rows of ``grads``.

    Sort the ids (all >= 0), find where each run of equal ids starts, add up
    each run with ``np.add.reduceat``: O(B log B + B d).
    """
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.diff(sorted_ids, prepend=-1))
    return sorted_ids[starts], np.add.reduceat(grads[order], starts, axis=0)


@dataclass
class SparseGradients:
    """Gradients of J / 2 on a batch, only for the rows the batch touched."""

    words: np.ndarray          # distinct word ids
    word_grad: np.ndarray      # (len(words), d + 1)
    contexts: np.ndarray
    context_grad: np.ndarray
    cost: float                # J / 2 on the batch


def batch_gradients(model: GloVe, batch: Records) -> SparseGradients:
    """One record's gradient is fdiff [w~_j, 1] for row i and fdiff [w_i, 1] for row j."""
    return row_gradients(batch, *gather_residuals(model, batch))


def row_gradients(batch: Records, w: np.ndarray, c: np.ndarray,
                  diff: np.ndarray) -> SparseGradients:
    """The summed gradients per row, from the gathered rows (overwritten) and residuals."""
    fdiff = batch.weight * diff
    c[:, -1] = 1.0  # reuse the gathered copies as [w~_j, 1] and [w_i, 1]
    w[:, -1] = 1.0
    c *= fdiff[:, None]
    w *= fdiff[:, None]
    words, word_grad = sum_rows(batch.row, c)
    contexts, context_grad = sum_rows(batch.col, w)
    return SparseGradients(words, word_grad, contexts, context_grad, 0.5 * float(fdiff @ diff))


def adagrad_rows(table: np.ndarray, gradsq: np.ndarray, rows: np.ndarray, grad: np.ndarray,
                 eta: float = ETA) -> None:
    """glove.c's AdaGrad on some rows: table -= eta g / sqrt(G); G += (eta g)^2. O(rows d)."""
    scaled = eta * grad
    sums = gradsq[rows]
    table[rows] -= scaled / np.sqrt(sums)
    scaled *= scaled
    sums += scaled
    gradsq[rows] = sums


def apply_gradients(model: GloVe, grads: SparseGradients, eta: float = ETA) -> None:
    """The AdaGrad step of every row the batch touched, in both tables."""
    adagrad_rows(model.word, model.word_gradsq, grads.words, grads.word_grad, eta)
    adagrad_rows(model.context, model.context_gradsq, grads.contexts, grads.context_grad, eta)


def train_epoch(model: GloVe, records: Records, rng: np.random.Generator | None,
                batch_size: int = 4096, eta: float = ETA,
                on_batch: Callable[[int], None] | None = None) -> float:
    """One pass over the records, shuffled by ``rng`` (in order if None); returns
    glove.c's cost: each batch's J / 2 just before its update, summed, per record.
    ``on_batch(n)`` is called after each batch of n records."""
    total = 0.0
    for batch in records.batches(batch_size, rng):
        grads = batch_gradients(model, batch)
        apply_gradients(model, grads, eta)
        total += grads.cost
        if on_batch is not None:
            on_batch(len(batch))
    return total / max(len(records), 1)


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffle of the n records in ``epoch``: the same in every process that asks."""
    return np.random.default_rng((seed, epoch)).permutation(n)


def train(model: GloVe, records: Records, epochs: int, batch_size: int = 4096,
          eta: float = ETA, seed: int = 0, on_batch: Callable[[int], None] | None = None,
          on_epoch: Callable[[int, float], None] | None = None) -> list[float]:
    """``epochs`` passes over the records in ``epoch_order``; returns the cost of each.

    The one-process run that every parallel strategy is compared with.
    """
    costs = []
    for epoch in range(epochs):
        order = epoch_order(len(records), seed, epoch)
        costs.append(train_epoch(model, records.take(order), None, batch_size, eta, on_batch))
        if on_epoch is not None:
            on_epoch(epoch, costs[-1])
    return costs


# ---- the same model through minidist's autograd (the lab's path) -----------------------

def autograd_loss(word: Tensor, context: Tensor, batch: Records) -> Tensor:
    """J / 2 on a batch, built from tensor operations: backward gives glove.c's gradients."""
    w, c = word[batch.row], context[batch.col]      # embedding gathers, (B, d + 1)
    dot = (w[:, :-1] * c[:, :-1]).sum(axis=1)
    diff = dot + w[:, -1] + c[:, -1] - batch.log_x
    return 0.5 * (batch.weight * diff * diff).sum()


class ReferenceAdaGrad(Optimizer):
    """glove.c's AdaGrad: theta -= lr g / sqrt(G), then G += (lr g)^2, G starting at 1.

    ``md.optim.AdaGrad`` adds g^2 to G *before* the step and starts G at 0,
    so it cannot reproduce glove.c's updates; this class does.
    """

    def __init__(self, params: list[Tensor], lr: float = ETA) -> None:
        super().__init__(params, {"lr": lr})

    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        if not state:
            state["gradsq"] = np.ones_like(param.data)
        scaled = group["lr"] * grad
        param.data -= scaled / np.sqrt(state["gradsq"])
        state["gradsq"] += scaled * scaled


# ---- the GloVe text format -------------------------------------------------------------

def save_vectors(path: str | Path, words: list[str], vectors: np.ndarray) -> None:
    """One line per word: ``word x1 x2 ... xd`` (enough digits to read back float64 exactly)."""
    if len(words) != len(vectors):
        raise ValueError(f"{len(words)} words but {len(vectors)} vectors")
    with open(path, "w", encoding="utf-8") as out:
        for word, vector in zip(words, vectors, strict=True):
            out.write(word + " " + " ".join(repr(float(x)) for x in vector) + "\n")


def load_vectors(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read a GloVe text file: the words in file order and a (V, d) float64 array."""
    words, rows = [], []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            fields = line.rstrip("\n").split(" ")
            if rows and len(fields) - 1 != len(rows[0]):
                raise ValueError(f"{path}:{number}: {len(fields) - 1} numbers, expected "
                                 f"{len(rows[0])}")
            words.append(fields[0])
            rows.append([float(x) for x in fields[1:]])
    return words, np.array(rows, dtype=np.float64).reshape(len(rows), -1)
