"""Adam (Kingma & Ba, 2014): momentum plus a step size per weight (Lab 1, Task 10).

Adam keeps two running averages per weight, of the gradient and of its square,
and counts its steps t = 1, 2, ...:

    m <- b1 * m + (1 - b1) * g          (first moment, "momentum")
    s <- b2 * s + (1 - b2) * g^2        (second moment)

Both start at zero, so early on they are biased toward zero; dividing by
(1 - b^t) corrects that (bias correction):

    m_hat = m / (1 - b1^t),   s_hat = s / (1 - b2^t)
    w <- w - lr * m_hat / (sqrt(s_hat) + eps)

A weight whose gradient is consistently large gets a step of about ``lr``; the
division by sqrt(s_hat) makes the step size insensitive to the gradient's
scale. ``weight_decay`` adds wd * w to the gradient first (L2, as in the
paper; not AdamW's decoupled decay). Each parameter counts its own steps
(PyTorch's convention), so one that got no gradient on some steps is
corrected for the steps it took.

``Adam.update`` is Task 10's answer for one parameter, run on ``blocks`` of it
(optimizer.py says why).

Cost per step: O(N) for N weights, 14 passes over each parameter (2 more for
weight decay); state: two arrays per parameter (2x the model).
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Real
from typing import Any

from minidist.autograd import Tensor
from minidist.backend import xp_of
from minidist.optim.optimizer import Optimizer, blocks
from minidist.util.answers import lab_answer
from minidist.util.values import finite


class Adam(Optimizer):
    """Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        betas = tuple(betas) if isinstance(betas, Iterable) else betas
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def check_hyper(self, group: dict[str, Any], where: str, stepping: bool = False) -> None:
        super().check_hyper(group, where, stepping)
        finite(f"{where}eps", group["eps"])
        finite(f"{where}weight_decay", group["weight_decay"])
        betas = group["betas"]
        pair = tuple(betas) if isinstance(betas, Iterable) else ()
        if len(pair) != 2 or not all(isinstance(b, Real) and 0.0 <= b < 1.0 for b in pair):
            raise ValueError(f"{where}betas must be two numbers in [0, 1), got {betas!r}")

    @lab_answer("lab01_adam")
    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        """One step of ``param``: m and s, their bias correction, w -= lr m_hat / sqrt(s_hat)."""
        lr, eps = float(group["lr"]), float(group["eps"])
        weight_decay = float(group["weight_decay"])
        if weight_decay:
            grad = grad + weight_decay * param.data  # a new array: param.grad stays as it was
        xp = xp_of(param.data)
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(param.data)     # m
            state["exp_avg_sq"] = xp.zeros_like(param.data)  # s
        state["step"] += 1
        t = state["step"]
        b1, b2 = (float(b) for b in group["betas"])
        for p, m, s in blocks(param, grad, state["exp_avg"], state["exp_avg_sq"]):
            m *= b1
            m += (1 - b1) * p.grad
            s *= b2
            s += (1 - b2) * p.grad ** 2
            m_hat = m / (1 - b1 ** t)
            s_hat = s / (1 - b2 ** t)
            p.data -= lr * m_hat / (xp.sqrt(s_hat) + eps)
