"""Lookahead (Zhang, Lucas, Hinton & Ba, 2019): k steps forward, one step back.

Lookahead wraps any optimiser (the *fast* one) and keeps a second, *slow*
copy phi of the weights theta. Every step runs the fast optimiser; every
k-th step the slow weights move part of the way toward the fast ones, and the
fast weights restart from there:

    theta <- fast optimiser step           (k times)
    phi   <- phi + alpha * (theta - phi)   (slow step)
    theta <- phi

The slow weights average out the fast optimiser's oscillations. ``alpha = 1``
is the plain fast optimiser (``alpha = 0`` would never move: refused).

The slow copy is taken at the first ``step()``, from the weights that step
starts from, not when the wrapper is built: the weights may still change in
between (``DataParallel`` replaces every rank's with rank 0's when it wraps
the model; a checkpoint is loaded), and a copy of the old ones would pull each
replica back toward its own.

Cost: one extra copy of the weights; every k steps, 3 passes over them.
"""

from __future__ import annotations

from typing import Any

from minidist import backend
from minidist.optim.optimizer import Optimizer
from minidist.util.values import finite, whole


class Lookahead:
    """Lookahead(base_optimizer, k=5, alpha=0.5)."""

    def __init__(self, base_optimizer: Optimizer, k: int = 5, alpha: float = 0.5) -> None:
        k = whole("k", k, least=1)  # k = 2.5 would never take a slow step
        if not 0.0 < finite("alpha", alpha) <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha!r}")
        self.base_optimizer, self.k, self.alpha = base_optimizer, k, float(alpha)
        self.fast_steps = 0
        self.slow_weights: list[Any] | None = None  # phi, taken at the first step

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The fast optimiser's groups (so a learning-rate schedule can drive it)."""
        return self.base_optimizer.param_groups

    def parameters(self) -> list[Any]:
        return self.base_optimizer.parameters()

    def zero_grad(self) -> None:
        self.base_optimizer.zero_grad()

    def step(self) -> None:
        if self.slow_weights is None:  # phi_0 = theta_0, the weights training starts from
            self.slow_weights = [p.data.copy() for p in self.base_optimizer.parameters()]
        self.base_optimizer.step()
        self.fast_steps += 1
        if self.fast_steps % self.k:
            return
        for p, slow in zip(self.base_optimizer.parameters(), self.slow_weights, strict=True):
            xp = backend.xp_of(slow)
            diff = xp.subtract(p.data, slow)
            diff *= self.alpha
            slow += diff                 # phi <- phi + alpha (theta - phi)
            p.data[...] = slow           # theta <- phi

    def state_dict(self) -> dict[str, Any]:
        """The base optimiser's state, the step count and the slow weights (None before
        the first step: not taken yet)."""
        slow = self.slow_weights
        return {"base": self.base_optimizer.state_dict(), "fast_steps": self.fast_steps,
                "slow_weights": None if slow is None else
                [backend.to_numpy(s).copy() for s in slow]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        params, saved = self.base_optimizer.parameters(), state_dict["slow_weights"]
        if saved is not None and len(saved) != len(params):
            raise ValueError(f"state_dict holds {len(saved)} slow weights, this Lookahead "
                             f"has {len(params)} parameters")
        self.base_optimizer.load_state_dict(state_dict["base"])
        self.fast_steps = int(state_dict["fast_steps"])
        self.slow_weights = None
        if saved is not None:
            self.slow_weights = [p.data.copy() for p in params]  # this dtype, this device
            for slow, values in zip(self.slow_weights, saved, strict=True):
                slow[...] = backend.xp_of(slow).asarray(values)
