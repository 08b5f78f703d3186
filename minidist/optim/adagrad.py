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
        w -= lr g / sqrt(G)      then   G += (lr g)^2

glove.c divides by G from *before* this gradient, and sums the squares of
the *scaled* gradients lr g; its G starting at 1 makes the first step
exactly lr g. ``minidist.glove`` trains with glove.c's convention, on the
rows a batch touched; ``AdaGrad(params, convention="glove.c", eps=0,
initial_accumulator=1)`` is the same update as an optimiser of whole
tensors. Both call ``adagrad_rows``, the rule written once.

Cost per step: O(weights updated); state: one array G per parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from minidist import backend
from minidist.autograd import Tensor
from minidist.optim.optimizer import Optimizer
from minidist.util.answers import lab_answer

CONVENTIONS = ("textbook", "glove.c")
ALL = slice(None)  # ``rows`` that select a whole parameter


@lab_answer("lab05_adagrad")
def adagrad_rows(table: Any, gradsq: Any, rows: Any, grad: Any, lr: float = 0.05,
                 eps: float = 0.0, convention: str = "glove.c") -> None:
    """The AdaGrad step of ``table[rows]``, in place, with their sums ``gradsq[rows]``.

    ``rows``: distinct row ids (the words a GloVe batch touched) or ``ALL``;
    ``grad``: their gradient, the shape of ``table[rows]``. The other rows
    are neither read nor written: O(rows * d), however large the table.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"AdaGrad: convention must be one of {CONVENTIONS}, got {convention!r}")
    xp = backend.xp_of(table)
    sums = gradsq[rows]                # G of these rows, read once (a view when rows is ALL)
    scaled = lr * grad
    if convention == "textbook":
        sums += grad * grad            # G counts this gradient before the step
    table[rows] -= scaled / (xp.sqrt(sums) + eps)
    if convention == "glove.c":
        sums += scaled * scaled        # G counts it after the step, scaled by lr
    gradsq[rows] = sums


class AdaGrad(Optimizer):
    """AdaGrad(params, lr=0.05, eps=1e-8, initial_accumulator=0, convention="textbook")."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float = 0.05,
                 eps: float = 1e-8, initial_accumulator: float = 0.0,
                 convention: str = "textbook") -> None:
        if lr < 0 or eps < 0 or initial_accumulator < 0:
            raise ValueError("lr, eps and initial_accumulator must be >= 0")
        if convention not in CONVENTIONS:
            raise ValueError(f"AdaGrad: convention must be one of {CONVENTIONS}, "
                             f"got {convention!r}")  # at once, not at the first step
        super().__init__(params, dict(lr=lr, eps=eps, initial_accumulator=initial_accumulator,
                                      convention=convention))

    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        if not state:
            xp = backend.xp_of(param.data)
            state["sum"] = xp.full_like(param.data, float(group["initial_accumulator"]))
        adagrad_rows(param.data, state["sum"], ALL, grad, float(group["lr"]),
                     float(group["eps"]), group["convention"])
