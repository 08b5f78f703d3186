"""AdaGrad (Duchi, Hazan & Singer, 2011): a step size per weight that only shrinks.

Each weight keeps G, the sum of the squares of its gradients so far, and its
step is divided by sqrt(G). Weights updated often (frequent words) slow
down; rarely updated ones (rare words) keep large steps. That is why GloVe
trains with AdaGrad (lr = 0.05). The steps never grow again, so AdaGrad
eventually stops.

One rule, in two conventions that differ in two details:

    textbook (the paper; torch.optim.Adagrad)     G starts at 0 (``initial_accumulator``)
        G += g^2                 then   w -= lr g / (sqrt(G) + eps)
    glove.c (GloVe's reference code)              G starts at 1
        s = lr g                 then   w -= s / sqrt(G)   then   G += s^2

glove.c divides by G from *before* this gradient, and sums the squares of
the *scaled* gradients s; its G starting at 1 makes the first step exactly
lr g. Either convention may also clip each gradient component to
[-clip, clip] first, and ``lr`` and ``clip`` may be one number per column:
the current glove.c (``minidist.glove.adagrad_columns``) clips the vector's
components at 100 and steps with lr = 0.05, but takes its bias's step with
lr = 1, the gradient itself. ``glove_c_update`` is that rule for one weight,
written once: ``adagrad_rows`` runs it on the rows a batch touched (and
``AdaGrad(params, convention="glove.c", eps=0, initial_accumulator=1)`` on
whole tensors); glove.c's record-by-record loop (``minidist.glove.per_record``)
runs it compiled, one number at a time.

Cost per step: O(weights updated); state: one array G per parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from minidist import backend
from minidist.autograd import Tensor
from minidist.optim.optimizer import Optimizer
from minidist.util.answers import lab_answer
from minidist.util.values import finite

CONVENTIONS = ("textbook", "glove.c")
ALL = slice(None)  # ``rows`` that select a whole parameter


@lab_answer("lab05_adagrad")
def glove_c_update(grad: Any, gradsq: Any, lr: Any, clip: Any = None,
                   eps: float = 0.0) -> tuple[Any, Any]:
    """glove.c's AdaGrad for one weight, or element by element for arrays.

    Returns (the step to subtract from the weight, its new sum G). Plain
    arithmetic and numpy ufuncs only, so numba compiles the same lines.
    """
    if clip is not None:
        grad = np.fmin(np.fmax(grad, -clip), clip)  # glove.c's fmin(fmax(g, -100), 100)
    scaled = lr * grad
    return scaled / (np.sqrt(gradsq) + eps), gradsq + scaled * scaled


@lab_answer("lab05_adagrad")
def adagrad_rows(table: Any, gradsq: Any, rows: Any, grad: Any, lr: Any = 0.05,
                 eps: float = 0.0, convention: str = "glove.c", clip: Any = None) -> None:
    """The AdaGrad step of ``table[rows]``, in place, with their sums ``gradsq[rows]``.

    ``rows``: distinct row ids (the words a GloVe batch touched) or ``ALL``;
    ``grad``: their gradient, the shape of ``table[rows]``; ``lr`` and
    ``clip``: numbers, or one per column. The other rows are neither read
    nor written: O(rows * d), however large the table.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"AdaGrad: convention must be one of {CONVENTIONS}, got {convention!r}")
    xp = backend.xp_of(table)
    sums = gradsq[rows]                # G of these rows, read once (a view when rows is ALL)
    if convention == "glove.c":
        step, sums = glove_c_update(grad, sums, lr, clip, eps)  # G counts it after the step
        table[rows] -= step
    else:
        if clip is not None:
            grad = xp.clip(grad, -clip, clip)
        scaled = lr * grad
        sums += grad * grad            # G counts this gradient before the step
        table[rows] -= scaled / (xp.sqrt(sums) + eps)
    gradsq[rows] = sums


def _broadcasts(name: str, value: Any, params: list[Tensor]) -> None:
    """Refuse a per-column ``value`` (``lr``, ``clip``) that is ragged, or that does not
    broadcast to the shape of each parameter (updated in place, it cannot grow): shapes
    only, no array is copied from a device."""
    try:
        shape = np.shape(value)
    except ValueError:  # a ragged list
        raise ValueError(f"{name} must be a number or an array, got {value!r}") from None
    for p in params:
        target = p.data.shape or (1,)  # a scalar is updated as one value of a vector
        try:
            fits = np.broadcast_shapes(shape, target) == target
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"{name} of shape {shape} does not broadcast to a parameter of "
                             f"shape {p.data.shape}, got {value!r}")


class AdaGrad(Optimizer):
    """AdaGrad(params, lr=0.05, eps=1e-8, initial_accumulator=0, convention="textbook",
    clip=None); ``lr`` and ``clip`` may be arrays broadcast against each parameter."""

    lr_per_column = True

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: Any = 0.05,
                 eps: float = 1e-8, initial_accumulator: float = 0.0,
                 convention: str = "textbook", clip: Any = None) -> None:
        super().__init__(params, dict(lr=lr, eps=eps, initial_accumulator=initial_accumulator,
                                      convention=convention, clip=clip))

    def check_hyper(self, group: dict[str, Any], where: str, stepping: bool = False) -> None:
        for name in ("lr", "clip"):
            if group[name] is not None:
                _broadcasts(f"AdaGrad: {where}{name}", group[name], group["params"])
        super().check_hyper(group, where, stepping)  # lr, when a number
        finite(f"{where}eps", group["eps"])
        finite(f"{where}initial_accumulator", group["initial_accumulator"])
        lr, clip, convention = group["lr"], group["clip"], group["convention"]
        if np.ndim(lr) and not (stepping and backend.on_device(lr)):  # one per column
            column = backend.to_numpy(lr)
            if not (np.issubdtype(column.dtype, np.number) and np.all(np.isfinite(column))
                    and np.all(column >= 0)):
                raise ValueError(f"AdaGrad: {where}lr must be finite numbers >= 0, got {lr!r}")
        if clip is not None and not (stepping and backend.on_device(clip)) \
                and not np.all(backend.to_numpy(clip) > 0):  # NaN too
            raise ValueError(f"AdaGrad: {where}clip must be > 0, got {clip!r}")
        if convention not in CONVENTIONS:
            raise ValueError(f"AdaGrad: {where}convention must be one of {CONVENTIONS}, "
                             f"got {convention!r}")

    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        xp = backend.xp_of(param.data)
        if not state:
            state["sum"] = xp.full_like(param.data, float(group["initial_accumulator"]))
        lr, clip = group["lr"], group["clip"]  # one per column: moved to the parameter's device
        shape = param.data.shape or (1,)  # a scalar as one value of a vector: views, in place
        adagrad_rows(param.data.reshape(shape), state["sum"].reshape(shape), ALL,
                     grad.reshape(shape),
                     float(lr) if np.ndim(lr) == 0 else xp.asarray(lr), float(group["eps"]),
                     group["convention"], clip if np.ndim(clip) == 0 else xp.asarray(clip))
