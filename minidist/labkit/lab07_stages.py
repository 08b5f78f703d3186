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

``TaggedLog`` is that log, on the grader's side: each message call a step
posts, with its peer and tag, against ``expected_calls``; after a run that
failed, ``expect_peers_exist`` names a call to or from a rank that does not
exist (before the first, after the last: with K = 1, both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.labkit.checks import CheckFailed
from minidist.labkit.ranks import MessageLog
from minidist.nn import MLP
from minidist.nn.functional import cross_entropy
from minidist.parallel.pipeline import Step, split_stages


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


# --- the grader's side: whom each step sent to and received from -----------------------------
class TaggedLog(MessageLog):
    """Rank ``c`` as the answer sees it, writing down each message call it posts:
    ``("send", dest, tag)`` or ``("recv", source, tag)``. Everything else is ``c``'s."""

    def __init__(self, c: Any) -> None:
        super().__init__(c, [])

    def send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self.calls.append(("send", dest, tag))
        self._c.send(buf, dest, tag)

    def isend(self, buf: Any, dest: int, tag: int = 0) -> Any:
        self.calls.append(("send", dest, tag))
        return self._c.isend(buf, dest, tag)

    def recv(self, buf: Any, source: int, tag: int = 0) -> Any:
        self.calls.append(("recv", source, tag))
        return self._c.recv(buf, source, tag)

    def irecv(self, buf: Any, source: int, tag: int = 0) -> Any:
        self.calls.append(("recv", source, tag))
        return self._c.irecv(buf, source, tag)

    def sendrecv(self, sendbuf: Any, dest: int, recvbuf: Any, source: int, sendtag: int = 0,
                 recvtag: int = 0) -> Any:
        self.calls += [("send", dest, sendtag), ("recv", source, recvtag)]
        return self._c.sendrecv(sendbuf, dest, recvbuf, source, sendtag, recvtag)


def expected_calls(step: Step, last: int) -> list[tuple[str, int, int]]:
    """What a step posts on rank k: F receives from k-1 and sends to k+1 (tag 2m+1);
    B receives from k+1 and sends to k-1 (tag 2m+2); the ends of the pipe skip theirs."""
    k, m = step.stage, step.micro
    if step.phase == "F":
        return [("recv", k - 1, 2 * m + 1)] * (k > 0) + [("send", k + 1, 2 * m + 1)] * (k < last)
    return [("recv", k + 1, 2 * m + 2)] * (k < last) + [("send", k - 1, 2 * m + 2)] * (k > 0)


def words(calls: list[tuple[str, int, int]]) -> str:
    said = [f"{kind} {'to' if kind == 'send' else 'from'} rank {peer} (tag {tag})"
            for kind, peer, tag in calls]
    return "[" + ", ".join(said) + "]" if said else "nothing"


def expect_peers_exist(what: str, stages: int, logs: dict[int, tuple[TaggedLog, list]]) -> None:
    """After a failed run: a message posted to or from a rank that does not exist (rank -1
    before the first, rank K after the last) is named, with the step that posted it."""
    __tracebackhide__ = True
    for k, (log, begun) in sorted(logs.items()):
        for kind, peer, tag in log.calls:
            if not 0 <= peer < stages:
                step = begun[-1]
                name = "forward_step" if step.phase == "F" else "backward_step"
                edge = (f"rank {k} has no rank before it: it is the first rank, which reads x "
                        "and sends no gradient back" if peer < 0 else f"rank {k} has no rank "
                        f"after it: it is the last of K = {stages}, whose output goes into the "
                        "loss, and which receives no gradient")
                alone = " (with K = 1 it is the first and the last)" if stages == 1 else ""
                raise CheckFailed(f"{what}: {name} of micro-batch {step.micro} on rank {k} "
                                  f"posted a {kind} {'to' if kind == 'send' else 'from'} rank "
                                  f"{peer} (tag {tag}), but {edge}{alone}")
