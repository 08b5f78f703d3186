"""Adam (Kingma & Ba, 2014): momentum plus a per-weight step size.

Adam keeps two running averages per weight, of the gradient and of its square:

    v_t = b1 * v_{t-1} + (1 - b1) * g_t          (first moment, "momentum")
    s_t = b2 * s_{t-1} + (1 - b2) * g_t^2        (second moment)

Both start at zero, so early on they are biased toward zero; dividing by
(1 - b^t) corrects that (bias correction):

    v_hat = v_t / (1 - b1^t),   s_hat = s_t / (1 - b2^t)
    w <- w - lr * v_hat / (sqrt(s_hat) + eps)

A weight whose gradient is consistently large gets a step of about ``lr``; the
division by sqrt(s_hat) makes the step size insensitive to the gradient's
scale. ``weight_decay`` adds wd * w to the gradient first (L2, as in the
paper; not AdamW's decoupled decay).

Cost per step: O(number of weights), ~13 passes over each parameter, done in
place with one scratch array; state: two arrays per parameter (2x the model).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from minidist import backend
from minidist.autograd import Tensor
from minidist.optim.optimizer import Optimizer


class Adam(Optimizer):
    """Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)."""

    def __init__(self, params: Iterable[Tensor] | Iterable[dict], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise ValueError("lr, eps and weight_decay must be >= 0")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def update(self, param: Tensor, grad: Any, state: dict[str, Any],
               group: dict[str, Any]) -> None:
        lr, eps, wd = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        b1, b2 = (float(b) for b in group["betas"])
        w = param.data
        xp = backend.xp_of(w)
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(w)      # v
            state["exp_avg_sq"] = xp.zeros_like(w)   # s
        state["step"] += 1
        t, v, s = state["step"], state["exp_avg"], state["exp_avg_sq"]
        if wd:
            grad = grad + wd * w
        scratch = xp.empty_like(w)
        # 1. v = b1 v + (1 - b1) g
        v *= b1
        xp.multiply(grad, 1.0 - b1, out=scratch)
        v += scratch
        # 2. s = b2 s + (1 - b2) g^2
        s *= b2
        xp.multiply(grad, grad, out=scratch)
        scratch *= 1.0 - b2
        s += scratch
        # 3. w -= lr * v_hat / (sqrt(s_hat) + eps),
        #    computed as lr/(1-b1^t) * v / (sqrt(s)/sqrt(1-b2^t) + eps)
        xp.sqrt(s, out=scratch)
        scratch *= 1.0 / math.sqrt(1.0 - b2**t)
        scratch += eps
        xp.divide(v, scratch, out=scratch)
        scratch *= lr / (1.0 - b1**t)
        w -= scratch
