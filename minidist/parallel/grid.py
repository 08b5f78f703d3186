"""Composing parallelisms: ranks on a DP × PP × TP grid, one communicator per line of it.

Real systems combine data, pipeline and tensor parallelism (Megatron-LM's
"3-D parallelism"). The world's ranks are laid out on a grid of shape
(dp, pp, tp), tensor parallelism fastest, because its two allreduces per
block are the most frequent messages and neighbouring ranks share a machine:

    rank = (d · pp + p) · tp + t            coordinates (d, p, t)

Each collective runs in the group of ranks that differ in one coordinate
only, cut from the world by ``c.split(color, key)``:

- ``tp_group``: same (d, p): the ranks holding slices of the same layers;
- ``pp_group``: same (d, t): the stages of one pipeline, in order;
- ``dp_group``: same (p, t): the replicas of the same slice of the same
  stage, which average their gradients after each step.

Cost: three splits at start-up (each an exchange of two ints per rank);
then each group's own traffic (TP: two allreduces per block and pass; PP:
activations and gradients between neighbouring stages; DP: one allreduce
of the stage's gradients per step).
"""

from __future__ import annotations

from minidist import backend, comm
from minidist.util.values import whole


class ProcessGrid:
    """Rank ``c.rank``'s place on the (dp, pp, tp) grid and its three groups."""

    def __init__(self, c, dp: int = 1, pp: int = 1, tp: int = 1) -> None:
        dp, pp, tp = (whole(name, size, least=1)
                      for name, size in (("dp", dp), ("pp", pp), ("tp", tp)))
        if dp * pp * tp != c.size:
            raise ValueError(f"a grid of dp={dp} x pp={pp} x tp={tp} needs "
                             f"{dp * pp * tp} ranks, the communicator has {c.size}")
        self.c, self.shape = c, (dp, pp, tp)
        self.coords = self.coordinates(c.rank)
        d, p, t = self.coords
        self.tp_group = c.split(color=d * pp + p, key=t)
        self.pp_group = c.split(color=d * tp + t, key=p)
        self.dp_group = c.split(color=p * tp + t, key=d)

    def coordinates(self, rank: int) -> tuple[int, int, int]:
        """(d, p, t) of ``rank``."""
        _, pp, tp = self.shape
        return rank // (pp * tp), rank // tp % pp, rank % tp

    def describe(self) -> str:
        """The grid as a table: each rank's coordinates and the members of its groups."""
        lines = [f"grid dp={self.shape[0]} x pp={self.shape[1]} x tp={self.shape[2]}",
                 "rank  (d, p, t)  tp group   pp group   dp group"]
        for rank in range(self.c.size):
            lines.append(f"{rank:>4}  {self.coordinates(rank)!s:<9}  "
                         + "  ".join(f"{self._members(rank, axis)!s:<9}" for axis in (2, 1, 0)))
        return "\n".join(lines)

    def _members(self, rank: int, axis: int) -> list[int]:
        """The ranks that differ from ``rank`` only in coordinate ``axis``."""
        coords = list(self.coordinates(rank))
        members = []
        for value in range(self.shape[axis]):
            coords[axis] = value
            d, p, t = coords
            members.append((d * self.shape[1] + p) * self.shape[2] + t)
        return members


def average_gradients(params, group) -> None:
    """Each parameter's ``.grad`` becomes its mean over ``group``: one allreduce of them all.

    Data parallelism after a pipeline's flush: the stage's gradients are
    complete only when the last micro-batch's backward is done, so the
    average is taken then, in one flat buffer (``DataParallel`` instead
    overlaps bucketed allreduces with one backward pass). A parameter without
    a gradient on this rank counts as zeros, so every rank packs the same
    layout. Cost: ring, 2(P-1)/P of the gradients' bytes sent per rank.
    """
    params = list(params)
    if group.size == 1 or not params:
        return
    xp = backend.xp_of(params[0].data)
    flat = xp.concatenate([xp.zeros(p.data.size, p.data.dtype) if p.grad is None
                           else p.grad.reshape(-1) for p in params])
    # communication: the gradients of every replica of these parameters, summed
    total = comm.allreduce(flat, group, check=False) / group.size
    start = 0
    for p in params:
        p.grad = total[start:start + p.data.size].reshape(p.data.shape).astype(p.data.dtype)
        start += p.data.size
