"""Lab 7, Task 1: one pipeline stage's steps, as probes a check runs on each rank.

A stage is part of a model and a micro-batch's activations are tensors:
none of them is data. So each rank of ``check_exchange`` drives its stage
through these probes. When the lab is graded they run in the student's
kernel: ``stage_of`` builds the rank's stage from the sizes and seed the
check chose and keeps it there, ``forward_on`` and ``backward_on`` run one
step of the student's code on the communicator the grader lends (a
``TaggedLog`` of the rank's, so whom each step sent to and received from,
with which tag, is written down in the grader, and the bytes counted on its
fabric), and ``gradients_of`` returns the stage's gradients. The schedule,
the one-process reference and the verdict stay in the grader.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.parallel.pipeline import split_stages


class Held:
    """A micro-batch's stage input and output (the loss, on the last stage), kept between
    its forward and its backward."""

    def __init__(self, inp: Any, out: Any) -> None:
        self.inp, self.out = inp, out


def stage_of(forward_step: Callable[..., Any], sizes: tuple[int, ...], seed: int,
             stages: int, k: int) -> Any:
    """Probe: stage ``k`` of ``MLP(sizes)`` (float64, weights from ``seed``) cut into
    ``stages`` (``forward_step`` only says where it runs)."""
    return split_stages(MLP(list(sizes), dtype=np.float64, rng=seed), stages)[k]


def forward_on(forward_step: Callable[..., Any], c: Any, stage: Any, micro: int,
               x: np.ndarray | None, shape: tuple[int, ...], labels: np.ndarray | None,
               weight: float) -> tuple[str | None, float | None, Held | None]:
    """Probe: ``forward_step(c, stage, micro, x, shape)``. What it returned if that is not
    ``(inp, out)``, two Tensors (else None); on the last stage (``labels`` given) the
    micro-batch's loss times ``weight``, its share of the batch; what backward needs."""
    kept = forward_step(c, stage, micro, x, shape)
    if not (isinstance(kept, tuple) and len(kept) == 2
            and all(isinstance(t, Tensor) for t in kept)):
        return type(kept).__name__, None, None
    inp, out = kept
    if labels is None:
        return None, None, Held(inp, out)
    loss = cross_entropy(out, labels) * weight
    return None, loss.item(), Held(inp, loss)


def backward_on(backward_step: Callable[..., Any], c: Any, micro: int, held: Held) -> None:
    """Probe: ``backward_step(c, micro, inp, out)`` on what the micro-batch's forward kept."""
    backward_step(c, micro, held.inp, held.out)


def gradients_of(stage: Any) -> dict[str, np.ndarray | None]:
    """Probe: the stage's gradients, by parameter name."""
    return {name: None if p.grad is None else np.array(p.grad)
            for name, p in stage.named_parameters()}
