"""The course's MLP classifier: one model, trained later by every strategy.

The network itself is ``minidist.nn.MLP`` (Linear layers with activations
between); this file adds what every trainer needs around it, so a single
process, data parallelism, a parameter server or a pipeline all build, score
and evaluate the very same model:

- ``build_mlp(sizes, seed)``: the same initial weights for the same seed;
- ``classification_loss(model, x, y)``: mean cross-entropy of the logits;
- ``accuracy(model, x, y)``: the fraction of argmax predictions that are right,
  computed under ``no_grad`` (no graph, no gradient memory).

Cost of one forward pass on a batch of B: 2 * B * sum_i sizes[i] * sizes[i+1]
flops; backward about twice that.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from minidist import backend
from minidist.autograd import Tensor, no_grad
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy

DIGITS_SIZES = (64, 128, 10)  # 8x8 pixels in, one hidden layer, 10 classes out


def build_mlp(sizes: Sequence[int] = DIGITS_SIZES, activation: str = "relu",
              seed: int = 0, dtype=np.float32) -> MLP:
    """A freshly initialised MLP whose weights depend only on ``seed``."""
    return MLP(list(sizes), activation=activation, dtype=dtype, rng=np.random.default_rng(seed))


def classification_loss(model: MLP, x, y) -> Tensor:
    """Mean cross-entropy of ``model(x)`` against integer labels ``y``."""
    return cross_entropy(model(x), y)


def predict(model: MLP, x, batch_size: int = 4096) -> np.ndarray:
    """Predicted class ids for the rows of ``x`` (host numpy array), without a graph."""
    predictions = []
    with no_grad():
        for start in range(0, len(x), batch_size):
            logits = model(x[start:start + batch_size])
            predictions.append(backend.to_numpy(logits.data.argmax(axis=1)))
    return np.concatenate(predictions) if predictions else np.zeros(0, dtype=np.int64)


def accuracy(model: MLP, x, y, batch_size: int = 4096) -> float:
    """Fraction of rows of ``x`` whose predicted class equals ``y``."""
    if len(x) == 0:
        raise ValueError("accuracy of an empty set is undefined")
    return float(np.mean(predict(model, x, batch_size) == backend.to_numpy(y)))


__all__ = ["DIGITS_SIZES", "MLP", "accuracy", "build_mlp", "classification_loss", "predict"]
