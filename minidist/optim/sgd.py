"""Stochastic gradient descent, with momentum and weight decay.

Mini-batch SGD moves every weight against the mean gradient of a batch:

    w <- w - lr * g

Options, applied in this order (PyTorch's conventions, without dampening):

- weight decay (L2 penalty wd/2 * |w|^2):  g <- g + wd * w
- momentum mu, a running sum of past steps, buffer b (b = g on the first step):
      b <- mu * b + g
      g <- b                 (heavy ball)
      g <- g + mu * b        (Nesterov: look one momentum step ahead)

Cost per step: O(number of weights), 2-5 passes over each parameter; state:
one buffer per parameter with momentum, none without.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from minidist.autograd import Tensor
from minidist.optim.optimizer import Optimizer


class SGD(Optimizer):
    """SGD(params, lr, momentum=0.0, weight_decay=0.0, nesterov=False)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float,
                 momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False) -> None:
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError("lr, momentum and weight_decay must be >= 0")
        if nesterov and momentum == 0:
            raise ValueError("Nesterov momentum needs momentum > 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        lr, mu, wd = float(group["lr"]), float(group["momentum"]), float(group["weight_decay"])
        w = param.data
        if wd:
            grad = grad + wd * w  # a new array: param.grad itself stays as backward left it
        if mu:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.copy()
            else:
                buf *= mu
                buf += grad
            grad = grad + mu * buf if group["nesterov"] else buf
        w -= lr * grad
