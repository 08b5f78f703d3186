"""The GloVe model (Pennington, Socher & Manning, 2014): two tables of word vectors.

Every word i has a vector w_i and a bias b_i, and, as a context, a second
vector w~_i and bias b~_i. Training fits their dot products to the logarithm
of the co-occurrence counts X_ij, over the non-zero counts only (``gradients.py``):

    J = sum_ij f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2
    f(x) = min(1, (x / x_max)^alpha)          alpha = 0.75, x_max = 100

f gives rare, noisy pairs little weight and caps frequent ones at 1.

Storage, as in glove.c: a table row is [w_i, b_i] (the bias is the last
column), so one gather fetches a word's vector and bias at once; each table
has a twin of AdaGrad sums G of the same shape, starting at 1; AdaGrad
treats the two parts of a row differently (``adagrad_columns``). The output
vectors are w + w~ (the two are trained symmetrically; their sum is a little
better than either).

The non-zeros are the training *records*: four arrays of one length, the ids
i and j, f(X_ij) and log X_ij, computed once. A batch is a ``Records`` too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from minidist.util.answers import lab_answer

X_MAX, ALPHA, ETA = 100.0, 0.75, 0.05
GRAD_CLIP = 100.0  # glove.c's -grad-clip: each component of a vector's gradient, at most 100


@lab_answer("lab05_weighting")
def weighting(x: np.ndarray, x_max: float = X_MAX, alpha: float = ALPHA) -> np.ndarray:
    """f(x) = min(1, (x / x_max)^alpha), elementwise."""
    return np.minimum(1.0, (np.asarray(x, dtype=np.float64) / x_max) ** alpha)


def adagrad_columns(dim: int, eta: float = ETA) -> tuple[np.ndarray, np.ndarray]:
    """glove.c's AdaGrad, column by column of a row [w_i, b_i]: (learning rates, clips).

    The vector's d components: rate eta, gradient clipped to +-100; the bias:
    rate 1 (its step is g / sqrt(G), G += g^2), no clipping. This is the
    current glove.c (stanfordnlp/GloVe since July 2019, clipping at 100 since
    January 2020; unchanged through 2025); before, the bias took eta too.
    """
    rates, clips = np.full(dim + 1, float(eta)), np.full(dim + 1, GRAD_CLIP)
    rates[-1], clips[-1] = 1.0, np.inf
    return rates, clips


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
        row, col, val = np.asarray(row), np.asarray(col), np.asarray(val, dtype=np.float64)
        if not len(row) == len(col) == len(val):
            raise ValueError(f"Records.from_counts: row, col and val have lengths {len(row)}, "
                             f"{len(col)} and {len(val)}; they must be equal")
        if np.any(val <= 0):
            raise ValueError("Records.from_counts: every count must be > 0 (log X_ij)")
        return cls(row.astype(np.int64), col.astype(np.int64), weighting(val, x_max, alpha),
                   np.log(val))

    def __len__(self) -> int:
        return len(self.row)

    def take(self, index: Any) -> Records:
        return Records(self.row[index], self.col[index], self.weight[index], self.log_x[index])

    def batches(self, batch_size: int, rng: np.random.Generator | None = None
                ) -> Iterator[Records]:
        """Consecutive batches, after a shuffle when ``rng`` is given."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
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
        if vocab_size < 1 or dim < 1:
            raise ValueError(f"GloVe.create: need vocab_size >= 1 and dim >= 1, got "
                             f"{vocab_size} and {dim}")
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
