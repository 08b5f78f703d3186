"""What a server does with a gradient: the optimiser of one shard, and staleness-aware SGD.

A server holds its shard's values as one flat vector and, beside it, the
optimiser's state (the same length): nothing per worker. A push of the rows
``keys`` arrives as their gradient ``g``; ``index`` says where those rows lie
in the shard (a slice for a dense push, an index array for sparse rows), and
the update touches those values only: O(values pushed), however large the
shard. Where every row of the shard has one width (an embedding table), the
server sees the vectors as a table of rows (``ShardState.as_rows``) and
``index`` and ``g`` name rows, one index per row: the same rule reads and
writes the same numbers, with a 64th of the indices for rows of 64.

- **sgd**: ``w -= lr·g``.
- **adagrad**: ``G += g²; w -= lr·g / (√G + eps)`` (the textbook rule,
  ``optim.adagrad_rows``).
- **adam**: Adam's moments and bias correction, with each value counting its
  own steps (a row that is pushed rarely is corrected for the steps it took:
  "lazy" Adam, as sparse embeddings need).

**Staleness-aware SGD** (Zhang, Gupta, Lian & Liu 2016, "n-softsync"): λ
workers; the server waits for c = ⌊λ/n⌋ gradients and applies their
average, each scaled by its own staleness:

    g = (1/c) Σ_l α(τ_l)/α0 · Δθ_l,      θ ← θ − α0·g,      α(τ) = α0 / τ

where τ_l, the gradient's **staleness**, is 1 + the updates (shard
versions) applied between the pull it was computed from and its own: a
gradient whose weights nobody changed meanwhile has τ = 1 and gets α0, so
τ >= 1 always. Counted so, n-softsync's mean staleness is about n (the
paper's ⟨τ⟩ = n), and α0/τ ≈ α0/n. n = λ is asynchronous SGD
(c = 1), n = 1 waits for one gradient from everyone (c = λ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from minidist.optim.adagrad import adagrad_rows
from minidist.util.answers import lab_answer
from minidist.util.values import finite

RULES = ("sgd", "adagrad", "adam")


@lab_answer("lab06_staleness_lr")
def staleness_lr(lr0: float, tau: int) -> float:
    """α(τ) = α0/τ for a gradient of staleness τ >= 1."""
    return lr0 / tau


@dataclass(frozen=True)
class ServerOptimizer:
    """The rule every server applies to its shard: ``rule`` in RULES, its
    hyper-parameters, and whether each gradient's step is scaled by α(τ)/α0."""

    rule: str = "sgd"
    lr: float = 0.1
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    staleness_aware: bool = False

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"server optimiser must be one of {RULES}, got {self.rule!r}")
        for name in ("lr", "eps"):  # NaN or inf would reach every value of every shard
            object.__setattr__(self, name, finite(f"server optimiser's {name}",
                                                  getattr(self, name)))
        if self.staleness_aware and self.rule != "sgd":  # g/τ: Adam's m/√v undoes it
            raise ValueError(f"staleness-aware steps (α0/τ, Zhang et al. 2016) are SGD's: "
                             f"{self.rule}'s normalised step would cancel a gradient's 1/τ")

    def scale(self, tau: int) -> float:
        """How much of its step a gradient of staleness ``tau`` >= 1 gets."""
        return staleness_lr(self.lr, tau) / self.lr if self.staleness_aware and self.lr else 1.0


class ShardState:
    """One server's shard: its values, the optimiser's state, and its version."""

    def __init__(self, values: np.ndarray, optimizer: ServerOptimizer) -> None:
        self.values, self.optimizer = values, optimizer
        self.version = 0  # updates applied so far
        rule = optimizer.rule
        self.sums = np.zeros_like(values) if rule == "adagrad" else None  # AdaGrad's G
        self.moments = tuple(np.zeros_like(values) for _ in range(3)) if rule == "adam" else None

    def as_rows(self, width: int) -> None:
        """Hold the values and the state as rows of ``width`` values (views of the same
        memory): an index then names rows. What a checkpoint saves stays the same numbers."""
        self.values = self.values.reshape(-1, width)
        if self.sums is not None:
            self.sums = self.sums.reshape(-1, width)
        if self.moments is not None:
            self.moments = tuple(m.reshape(-1, width) for m in self.moments)

    @lab_answer("lab06_shard_update")
    def apply(self, index: slice | np.ndarray, grad: np.ndarray) -> None:
        """One update of the values at ``index`` with their gradient ``grad``; version += 1.

        Reads and writes ``values[index]`` and the same positions of the state only."""
        opt = self.optimizer
        if opt.rule == "sgd":
            self.values[index] -= opt.lr * grad
        elif opt.rule == "adagrad":  # G += g², then the step (Lab 5's rule, textbook order)
            adagrad_rows(self.values, self.sums, index, grad, opt.lr, opt.eps,
                         convention="textbook")
        else:  # Adam, each value counting its own steps t
            (b1, b2), (steps, first, second) = opt.betas, self.moments
            t = steps[index] + 1
            m = b1 * first[index] + (1 - b1) * grad
            s = b2 * second[index] + (1 - b2) * grad ** 2
            steps[index], first[index], second[index] = t, m, s
            m_hat, s_hat = m / (1 - b1 ** t), s / (1 - b2 ** t)  # bias-corrected
            self.values[index] -= opt.lr * m_hat / (np.sqrt(s_hat) + opt.eps)
        self.version += 1


class SoftSync:
    """n-softsync's accumulator: gradients summed (each scaled by α(τ)/α0) until ``c``
    have arrived; then their average is one update. When workers leave, the server
    asks for fewer (``resize``), and at the end takes what is left."""

    def __init__(self, num_keys: int, shape: int | tuple[int, int], dtype: np.dtype,
                 c: int) -> None:
        if c < 1:
            raise ValueError(f"softsync needs c >= 1 gradients per update, got {c}")
        self.c, self.count = c, 0
        self.total = np.zeros(shape, dtype)  # the shard's values' shape
        self.touched = np.zeros(num_keys, bool)

    @lab_answer("lab06_softsync")
    def add(self, keys: np.ndarray, index: slice | np.ndarray, grad: np.ndarray,
            scale: float) -> bool:
        """Add one scaled gradient of the rows ``keys``; True once ``c`` have arrived."""
        self.total[index] += scale * grad
        self.touched[keys] = True
        self.count += 1
        return self.count == self.c

    def resize(self, c: int) -> bool:
        """Wait for ``c`` >= 1 gradients from now on; True if as many have come already."""
        self.c = max(1, c)
        return self.count >= self.c

    def apply_to(self, shard: ShardState, value_index: Callable[[np.ndarray], Any]) -> None:
        """The average so far as one update of ``shard`` (``value_index``: the positions
        of the values of keys counted from the shard's first); start again."""
        keys, mean = self.take()
        index = value_index(keys)
        shard.apply(index, mean[index])

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """(the keys touched, counted from the shard's first; the average: the total over
        the whole shard divided by the gradients in it, c), and start again."""
        keys = np.flatnonzero(self.touched)
        total = self.total / self.count
        self.total[:] = 0
        self.touched[:] = False
        self.count = 0
        return keys, total
