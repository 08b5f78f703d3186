"""Learning-rate schedules: the step size as a function of the step number.

A schedule is any callable ``step -> lr`` (step = 0, 1, 2, ... counts
optimiser steps). The functions below build the usual ones; they compose,
because ``with_warmup`` wraps any other schedule. ``LRScheduler`` writes a
schedule's value into an optimiser's groups after every step:

    schedule = with_warmup(cosine(0.1, total_steps=1000), warmup_steps=50)
    scheduler = LRScheduler(opt, schedule)      # sets lr = schedule(0) now
    for x, y in batches:
        ...; opt.step(); scheduler.step()        # lr = schedule(1), schedule(2), ...

Formulas (t = step, T = total steps, W = warm-up steps):

- constant:     lr_t = lr
- step decay:   lr_t = lr * gamma^floor(t / step_size)
- cosine:       lr_t = min_lr + (lr - min_lr) * (1 + cos(pi * min(t, T) / T)) / 2
- warm-up:      lr_t = start_lr + (after(0) - start_lr) * t / W   for t < W,
                lr_t = after(t - W)                               afterwards
- linear scaling for large batches (Goyal et al. 2017, "ImageNet in 1 hour"):
  a batch k times larger takes a k times larger step, lr = base_lr * batch /
  base_batch, reached by a gradual linear warm-up from base_lr over W steps
  (a large lr straight away diverges while the weights still change fast).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from minidist.util.answers import lab_answer
from minidist.util.values import finite, whole

Schedule = Callable[[int], float]


def constant(lr: float) -> Schedule:
    """lr_t = lr."""
    return lambda step: lr


def step_decay(lr: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """lr_t = lr * gamma^floor(t / step_size): divide by 1/gamma every step_size steps."""
    if step_size < 1:
        raise ValueError(f"step_size must be >= 1, got {step_size}")
    return lambda step: lr * gamma ** (step // step_size)


def cosine(lr: float, total_steps: int, min_lr: float = 0.0) -> Schedule:
    """lr_t = min_lr + (lr - min_lr)(1 + cos(pi t / T)) / 2, then min_lr from t = T on."""
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")

    def schedule(step: int) -> float:
        progress = min(step, total_steps) / total_steps
        return min_lr + (lr - min_lr) * (1.0 + math.cos(math.pi * progress)) / 2.0

    return schedule


@lab_answer("lab04_lr_schedule")
def with_warmup(after: Schedule, warmup_steps: int, start_lr: float = 0.0) -> Schedule:
    """Linear ramp from ``start_lr`` to ``after(0)`` over W steps, then ``after(t - W)``."""
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")

    def schedule(step: int) -> float:
        if step >= warmup_steps:
            return after(step - warmup_steps)
        return start_lr + (after(0) - start_lr) * step / warmup_steps

    return schedule


@lab_answer("lab04_lr_schedule")
def linear_warmup(lr: float, warmup_steps: int, start_lr: float = 0.0) -> Schedule:
    """lr_t = start_lr + (lr - start_lr) t / W for t < W, then lr."""
    return with_warmup(constant(lr), warmup_steps, start_lr)


@lab_answer("lab04_lr_schedule")
def scaled_lr(base_lr: float, batch_size: int, base_batch_size: int = 256) -> float:
    """The linear scaling rule: lr = base_lr * batch_size / base_batch_size."""
    return base_lr * batch_size / base_batch_size


@lab_answer("lab04_lr_schedule")
def linear_scaling(base_lr: float, batch_size: int, base_batch_size: int = 256,
                   warmup_steps: int = 0, after: Callable[[float], Schedule] = constant
                   ) -> Schedule:
    """Goyal et al.: warm up linearly from ``base_lr`` to the scaled lr over W steps.

    ``after(scaled)`` is the schedule once warm (constant by default; e.g.
    ``lambda lr: step_decay(lr, 3000)``).
    """
    scaled = scaled_lr(base_lr, batch_size, base_batch_size)
    return with_warmup(after(scaled), warmup_steps, start_lr=base_lr)


class LRScheduler:
    """Drives an optimiser's learning rate with a schedule: call ``step()`` after ``opt.step()``.

    Its state is its step count: ``load_state_dict(saved)`` (after building it,
    which sets ``schedule(0)``) goes on at ``schedule(saved step)``, the very lr
    of the run that saved it (``save_checkpoint(..., scheduler=)`` keeps it). A
    schedule's value that is not a finite number >= 0 is refused, naming the step.
    """

    def __init__(self, optimizer: Any, schedule: Schedule) -> None:
        self.optimizer, self.schedule = optimizer, schedule
        self.step_count = 0
        self._apply()

    def step(self) -> None:
        self.step_count += 1
        self._apply()

    def state_dict(self) -> dict[str, int]:
        return {"step_count": self.step_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Go on from a saved step count: lr = schedule(step_count) now."""
        self.step_count = whole("LRScheduler step_count", state_dict["step_count"])
        self._apply()

    def _apply(self) -> None:
        lr = float(self.schedule(self.step_count))  # checked as the optimisers check theirs
        self.last_lr = finite(f"the schedule's lr at step {self.step_count}", lr)
        for group in self.optimizer.param_groups:
            group["lr"] = self.last_lr
