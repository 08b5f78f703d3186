"""AdaGrad (Duchi, Hazan & Singer, 2011): a step size per weight that only shrinks.

Each weight accumulates the squares of all its past gradients, and its step is
divided by the root of that sum:

    G <- G + g^2                       (G starts at ``initial_accumulator``)
    w <- w - lr * g / (sqrt(G) + eps)

Weights that are updated often (frequent words) slow down; rarely updated
ones (rare words) keep large steps. That is why GloVe trains with AdaGrad
(lr = 0.05). The steps never grow again, so AdaGrad eventually stops.

Cost per step: O(number of weights), ~7 passes over each parameter; state:
one array per parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from minidist import backend
from minidist.autograd import Tensor
from minidist.optim.optimizer import Optimizer


class AdaGrad(Optimizer):
    """AdaGrad(params, lr=0.05, eps=1e-8, initial_accumulator=0)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float = 0.05,
                 eps: float = 1e-8, initial_accumulator: float = 0.0) -> None:
        if lr < 0 or eps < 0 or initial_accumulator < 0:
            raise ValueError("lr, eps and initial_accumulator must be >= 0")
        super().__init__(params, dict(lr=lr, eps=eps, initial_accumulator=initial_accumulator))

    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        lr, eps = float(group["lr"]), float(group["eps"])
        w = param.data
        xp = backend.xp_of(w)
        if not state:
            state["sum"] = xp.full_like(w, float(group["initial_accumulator"]))
        total = state["sum"]
        scratch = xp.multiply(grad, grad)
        total += scratch                       # G += g^2
        xp.sqrt(total, out=scratch)
        scratch += eps
        xp.divide(grad, scratch, out=scratch)  # g / (sqrt(G) + eps)
        scratch *= lr
        w -= scratch
