"""Layers and losses as plain functions of Tensors.

Everything here is written with Tensor operations, so autograd derives the
backward pass, except ``linear``: the most frequent layer of all is one op
with its own gradient rule (``autograd/ops_linear.py``), for speed.

Losses (Lecture 1). For a batch of n examples:

- cross-entropy from logits z (n x C) and class ids y:
      loss_i = -log softmax(z_i)[y_i] = -z_i[y_i] + log sum_c exp(z_i[c])
  computed through ``log_softmax``, which subtracts max_c z_i[c] before
  exponentiating: exp never overflows, and log never sees a zero.
- mean squared error: loss_i = (prediction_i - target_i)^2.

``reduction`` picks "mean" (the average, what SGD's "mean gradient" needs),
"sum", or "none" (one value per example).
"""

from __future__ import annotations

from minidist import backend
from minidist.autograd import Tensor
from minidist.autograd.ops_linear import LinearFunction

REDUCTIONS = ("mean", "sum", "none")


def as_tensor(x) -> Tensor:
    """A Tensor for ``x``: Tensors pass through, arrays are wrapped (no gradient)."""
    return x if isinstance(x, Tensor) else Tensor(backend.xp().asarray(x))


def linear(x, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x @ weight.T + bias, with weight of shape (out_features, in_features).

    Cost: 2 * batch * in * out flops forward, twice that backward. The same
    numbers as ``x @ weight.T + bias``, as one graph node instead of three.
    """
    return LinearFunction.apply(as_tensor(x), weight, bias)


def relu(x: Tensor) -> Tensor:
    return x.relu()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.log_softmax(axis=axis)


def class_ids(targets, num_classes: int):
    """``targets`` as a backend array of class ids, checked: 1-D integers in [0, C)."""
    xp = backend.xp()
    targets = xp.asarray(targets)
    if targets.ndim != 1:
        raise ValueError(f"targets must be 1-D class ids, got shape {targets.shape}")
    if targets.size and targets.dtype.kind not in "iu":  # 1.7 or True is no class id
        raise TypeError(f"targets must be integer class ids, got dtype {targets.dtype} "
                        "(convert exact ones with .astype(int))")
    if targets.size and (int(targets.min()) < 0 or int(targets.max()) >= num_classes):
        raise ValueError(f"targets must lie in [0, {num_classes}), "
                         f"got min {int(targets.min())}, max {int(targets.max())}")
    return targets


def _reduce(per_example: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return per_example.mean()
    if reduction == "sum":
        return per_example.sum()
    if reduction == "none":
        return per_example
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def cross_entropy(logits: Tensor, targets, reduction: str = "mean") -> Tensor:
    """Cross-entropy between ``logits`` (n x C) and integer class ids ``targets`` (n,).

    loss_i = -log_softmax(z_i)[y_i], the log-probability of the true class,
    picked by indexing (a one-hot mask would multiply a logit of -inf, a masked
    class, by 0: NaN). Its gradient with respect to the logits is
    softmax(z_i) - onehot(y_i) (divided by n for "mean"). Cost: O(n * C).
    """
    if logits.ndim != 2:
        raise ValueError(f"logits must be (batch, classes), got shape {logits.shape}")
    if isinstance(targets, Tensor):
        targets = targets.data
    targets = class_ids(targets, logits.shape[1])
    if targets.shape[0] != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} rows of logits but {targets.shape[0]} targets")
    rows = backend.xp().arange(targets.shape[0])
    per_example = -logits.log_softmax(axis=-1)[rows, targets]
    return _reduce(per_example, reduction)


def mse_loss(prediction: Tensor, target, reduction: str = "mean") -> Tensor:
    """Mean squared error: (prediction - target)^2, reduced over every element.

    ``target`` is a Tensor or array of the same shape (it may need no gradient).
    Cost: O(number of elements).
    """
    target = as_tensor(target)
    if target.shape != prediction.shape:  # (N, 1) against (N,) would broadcast to (N, N)
        raise ValueError(f"mse_loss: prediction of shape {prediction.shape} and target of "
                         f"shape {target.shape}; they must have the same shape")
    diff = prediction - target
    return _reduce(diff * diff, reduction)
