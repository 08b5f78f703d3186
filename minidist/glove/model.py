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

Device: ``GloVe.create`` and ``Records.from_counts`` compute on the host (the
same numbers whatever the device) and put their arrays on the current device
(``md.set_device``) once; the mini-batch trainer (``training``) then keeps the
tables, their sums and the batches there. ``to(xp)`` moves a model or records
explicitly (``to(numpy)``: a host copy, for saving or for the trainers that
run on the CPU only: Hogwild, sharded and DDP, and glove.c's record loop
except on a GPU; they refuse a model on a device, see ``require_host``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from types import ModuleType
from typing import Any

import numpy as np

from minidist import backend
from minidist.util.answers import lab_answer
from minidist.util.values import finite, positive

X_MAX, ALPHA, ETA = 100.0, 0.75, 0.05
GRAD_CLIP = 100.0  # glove.c's -grad-clip: each component of a vector's gradient, at most 100


@lab_answer("lab05_weighting")
def weighting(x: np.ndarray, x_max: float = X_MAX, alpha: float = ALPHA) -> np.ndarray:
    """f(x) = min(1, (x / x_max)^alpha), elementwise (Task 1's answer, line for line;
    ``Records.from_counts`` checks x_max and alpha, ``weighting_options``)."""
    return np.minimum(1.0, (np.asarray(x, dtype=np.float64) / x_max) ** alpha)


def weighting_options(x_max: object, alpha: object) -> tuple[float, float]:
    """(x_max, alpha) as floats: x_max a finite number > 0, alpha one >= 0 (0: f = 1).
    An x_max <= 0 makes f NaN, or 1 for every record by glove.c's ``x > x_max ? 1 : ...``."""
    return positive("x_max", x_max), finite("alpha", alpha)


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

    row: Any             # int, word ids i; on the host or a device
    col: Any             # int, context ids j
    weight: Any          # f(X_ij)
    log_x: Any           # log X_ij

    @classmethod
    def from_counts(cls, row: Any, col: Any, val: Any, x_max: float = X_MAX,
                    alpha: float = ALPHA, vocab_size: int | None = None) -> Records:
        """The records of host counts, computed on the host, put on the current device.

        Ids must be whole numbers >= 0 (below ``vocab_size`` when given), counts finite
        and > 0, ``weighting_options`` x_max and alpha: anything else would train the
        wrong rows, or NaNs, or nothing, without a word."""
        x_max, alpha = weighting_options(x_max, alpha)
        row, col, val = np.asarray(row), np.asarray(col), np.asarray(val, dtype=np.float64)
        if not row.ndim == col.ndim == val.ndim == 1:
            raise ValueError(f"Records.from_counts: row, col and val have shapes {row.shape}, "
                             f"{col.shape} and {val.shape}; they must be 1-D")
        if not len(row) == len(col) == len(val):
            raise ValueError(f"Records.from_counts: row, col and val have lengths {len(row)}, "
                             f"{len(col)} and {len(val)}; they must be equal")
        for name, ids in (("row", row), ("col", col)):
            if len(ids) and not np.issubdtype(ids.dtype, np.integer):
                raise ValueError(f"Records.from_counts: {name} holds {ids.dtype} values; "
                                 "word ids are integers")
        check_ids(row, col, vocab_size, "Records.from_counts")
        if not np.all(np.isfinite(val)):
            raise ValueError("Records.from_counts: every count must be finite (a NaN or an "
                             f"infinity at position {int(np.flatnonzero(~np.isfinite(val))[0])})")
        if np.any(val <= 0):
            raise ValueError("Records.from_counts: every count must be > 0 (log X_ij)")
        host = cls(row.astype(np.int64), col.astype(np.int64), weighting(val, x_max, alpha),
                   np.log(val))
        return host.to(backend.xp())

    def __len__(self) -> int:
        return len(self.row)

    def arrays(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to(self, xp: ModuleType) -> Records:
        """These records on ``xp``'s device: the same arrays if there, else one copy."""
        return Records(**_moved(self.arrays(), xp))

    def take(self, index: Any) -> Records:
        """The records at ``index`` (a slice, or positions on the host or the device)."""
        if not isinstance(index, slice):  # positions made on the host move over once
            index = backend.xp_of(self.row).asarray(index)
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

    word: Any                 # (V, d + 1), on the host or a device
    context: Any              # (V, d + 1)
    word_gradsq: Any          # (V, d + 1), starts at 1
    context_gradsq: Any

    @classmethod
    def create(cls, vocab_size: int, dim: int, seed: int = 0) -> GloVe:
        """glove.c's start: every number uniform in [-0.5, 0.5) / d, every G at 1.
        Drawn on the host (the same start on every device), put on the current device."""
        if vocab_size < 1 or dim < 1:
            raise ValueError(f"GloVe.create: need vocab_size >= 1 and dim >= 1, got "
                             f"{vocab_size} and {dim}")
        rng = np.random.default_rng(seed)
        word, context = (rng.random((2, vocab_size, dim + 1)) - 0.5) / dim
        host = cls(word, context, np.ones_like(word), np.ones_like(context))
        return host.to(backend.xp())

    @property
    def dim(self) -> int:
        return self.word.shape[1] - 1

    def arrays(self) -> dict[str, np.ndarray]:
        return {"word": self.word, "context": self.context,
                "word_gradsq": self.word_gradsq, "context_gradsq": self.context_gradsq}

    def copy(self) -> GloVe:
        return GloVe(**{name: a.copy() for name, a in self.arrays().items()})

    def to(self, xp: ModuleType) -> GloVe:
        """This model on ``xp``'s device: the same arrays if there, else one copy
        (``to(numpy)``: a host copy, to save or to hand to a CPU-only trainer)."""
        return GloVe(**_moved(self.arrays(), xp))

    def vectors(self) -> Any:
        """The output vectors w + w~, shape (V, d), where the tables are
        (``backend.to_numpy`` copies them to the host for evaluation)."""
        return self.word[:, :-1] + self.context[:, :-1]


def check_ids(row: Any, col: Any, vocab_size: int | None, who: str) -> None:
    """Word ids from 0 (to ``vocab_size`` - 1, when given): a negative id would index
    from the end of a table, and ``sum_rows`` takes -1 for "no row"."""
    for name, ids in (("row", row), ("col", col)):
        if not len(ids):
            continue
        low, high = int(ids.min()), int(ids.max())  # on a device: one copy back each
        if low < 0 or (vocab_size is not None and high >= vocab_size):
            bound = f" and < {vocab_size}" if vocab_size is not None else ""
            raise ValueError(f"{who}: {name} holds the word id "
                             f"{low if low < 0 else high}; ids must be >= 0{bound}")


def _moved(arrays: dict[str, Any], xp: ModuleType) -> dict[str, Any]:
    """``arrays`` on ``xp``'s device: as they are if there, else copied once."""
    if all(backend.xp_of(a) is xp for a in arrays.values()):
        return arrays
    move = backend.to_numpy if xp is np else xp.asarray
    return {name: move(a) for name, a in arrays.items()}


def require_host(trainer: str, *parts: GloVe | Records) -> None:
    """The trainers that run on the CPU only (glove.c's compiled record loop, Hogwild's
    shared memory, the sharded and DDP ranks) refuse a model or records on a device."""
    for part in parts:
        if any(backend.on_device(a) for a in part.arrays().values()):
            raise ValueError(
                f"{trainer} runs on the CPU only, and its {type(part).__name__} arrays are "
                f"on a device: train on the device with glove.train (mini-batches), or give "
                f"{trainer} host copies, .to(numpy), and move the model back after")
