"""Stochastic gradient descent, with momentum and weight decay (Lab 1, Task 9).

Mini-batch SGD moves every weight against the mean gradient of a batch:

    w <- w - lr * g

With momentum mu, a velocity v per weight, starting at zero, keeps a running
sum of past steps (heavy ball; PyTorch's convention, without dampening):

    v <- mu * v + g
    w <- w - lr * v

Options: ``weight_decay`` (an L2 penalty wd/2 * |w|^2) first adds wd * w to
the gradient; ``nesterov`` looks one momentum step ahead:
w <- w - lr * (g + mu * v).

``SGD.update`` is Task 9's answer for one parameter, run on ``blocks`` of it
(optimizer.py says why).

Cost per step: O(N) for N weights, 4 passes over each parameter with momentum
(2 without, 2 more for weight decay, 2 more for Nesterov); state: one
velocity per parameter with momentum, none without.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from minidist.autograd import Tensor
from minidist.backend import xp_of
from minidist.optim.optimizer import Optimizer, blocks
from minidist.util.answers import lab_answer
from minidist.util.values import finite


class SGD(Optimizer):
    """SGD(params, lr, momentum=0.0, weight_decay=0.0, nesterov=False)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float,
                 momentum: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      nesterov=nesterov))

    def check_hyper(self, group: dict[str, Any], where: str, stepping: bool = False) -> None:
        super().check_hyper(group, where, stepping)
        finite(f"{where}weight_decay", group["weight_decay"])
        momentum = group["momentum"]
        if not 0 <= finite(f"{where}momentum", momentum) < 1:  # >= 1: it never forgets
            raise ValueError(f"{where}momentum must lie in [0, 1), got {momentum!r}")
        if group["nesterov"] and momentum == 0:
            raise ValueError(f"{where}Nesterov momentum needs momentum > 0")

    @lab_answer("lab01_sgd_momentum")
    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        """One step of ``param``: v = momentum v + g, then w -= lr v."""
        lr, momentum = float(group["lr"]), float(group["momentum"])
        weight_decay, nesterov = float(group["weight_decay"]), group["nesterov"]
        if weight_decay:
            grad = grad + weight_decay * param.data  # a new array: param.grad stays as it was
        if not momentum:
            param.data -= lr * grad
            return
        if not state:
            state["momentum_buffer"] = xp_of(param.data).zeros_like(param.data)
        for p, v in blocks(param, grad, state["momentum_buffer"]):
            v *= momentum
            v += p.grad
            if nesterov:
                p.data -= lr * (p.grad + momentum * v)
            else:
                p.data -= lr * v
