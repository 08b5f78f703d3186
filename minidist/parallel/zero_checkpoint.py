"""ZeRO's optimiser state made whole for a checkpoint, and cut into shards again to resume.

A ``ShardedOptimizer`` (``zero.py``) keeps on rank r the optimiser state of
shard r only, where a checkpoint (``checkpoint.py``) is one file written by
rank 0. So the state is saved as that of *one* optimiser over the whole flat
vector of N values, and loaded from it:

1. ``whole_state(opt, to)``, on every rank: each array of the shard's state
   (SGD's velocity, Adam's two moments: n_r values on rank r) goes to rank
   ``to``, which joins the shards in rank order into one array of N values;
   a number (Adam's step count, the same on every rank) is rank ``to``'s.
   Rank ``to`` gets ``{"state": {0: {name: value}}, "param_groups": [...]}``,
   the other ranks None.
2. ``load_whole_state(opt, state)``, on every rank: each array of N values is
   cut to this rank's shard, ``bounds[rank]``, and given to the shard's
   optimiser.

Cost of step 1 for K arrays of state: rank ``to`` receives K·(P-1) messages of
ceil(N/P) values (a linear gather of shards padded to the longest, as the
allgather of a step pads them; each gather first runs the library's agreement
check, a recursive doubling of a small header) and holds K·N values until the file is
written, what DDP's every rank holds all the time; the other ranks hold
nothing more. Step 2 reads the whole file on every rank and keeps 1/P of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from minidist.comm import gather

if TYPE_CHECKING:
    from minidist.parallel.zero import ShardedOptimizer


def whole_state(opt: ShardedOptimizer, to: int = 0) -> dict[str, Any] | None:
    """Every rank's shard of the optimiser state joined on rank ``to``; None elsewhere."""
    mine = opt.optimizer.state_dict()  # host copies; one parameter, the shard: index 0
    entry = mine["state"].get(0, {})
    longest = opt.bounds[0][1] - opt.bounds[0][0]
    whole: dict[str, Any] = {}
    for name in sorted(entry):  # every rank has stepped as often: the same names
        value = entry[name]
        if getattr(value, "ndim", 0) == 0:  # a number, the same on every rank
            whole[name] = value
            continue
        padded = np.zeros(longest, value.dtype)
        padded[:value.size] = value
        # communication: this rank's shard of `name`, to rank `to`
        rows = gather(padded, opt.comm, root=to)
        if rows is not None:
            whole[name] = np.concatenate([row[:stop - start] for (start, stop), row
                                          in zip(opt.bounds, rows, strict=True)])
    if opt.comm.rank != to:
        return None
    return {"state": {0: whole} if entry else {}, "param_groups": mine["param_groups"]}


def load_whole_state(opt: ShardedOptimizer, state: dict[str, Any]) -> None:
    """This rank's shard of a whole state (``whole_state``'s, or a checkpoint's), loaded
    into the shard's optimiser; a state of another length is refused before anything
    changes (every rank reads the same state: the same error on every rank)."""
    n, (lo, hi) = len(opt.flat), opt.bounds[opt.comm.rank]
    entries = state["state"]
    if set(map(int, entries)) - {0}:
        raise ValueError(f"a ShardedOptimizer's state is that of one parameter (the flat vector "
                         f"of all {n} values), this one has {len(entries)} parameters: it is "
                         "another optimiser's")
    shard = {}
    for entry in entries.values():
        for name, value in entry.items():
            if getattr(value, "ndim", 0) and np.shape(value) != (n,):
                raise ValueError(f"the state's {name} has shape {np.shape(value)}, but the "
                                 f"parameters are {n} values: another model's state")
        shard[0] = {name: value[lo:hi] if getattr(value, "ndim", 0) else value
                    for name, value in entry.items()}
    opt.optimizer.load_state_dict({"state": shard, "param_groups": state["param_groups"]})
