"""Sharded data parallelism: ZeRO stages 1 and 2 (Lecture 7; Rajbhandari et al. 2020).

Data parallelism (``ddp.py``) keeps a whole copy of the *model states* on
every rank: the N parameters, their N gradients and the optimiser's state,
K values per parameter (SGD with momentum: K = 1, the velocity; Adam: K = 2,
m and s; AdaGrad: K = 1), and all P ranks apply the same update to the same
values. ZeRO removes the copies: flatten the parameters into one vector, cut
it into P shards (``chunk_bounds(N, P)``: rank r owns shard r, n_r ≈ N/P
values), and let rank r keep the optimiser state of its shard only and
update its shard only. The training loop reads like DDP's; the optimiser
communicates instead of a model wrapper:

    opt = ShardedOptimizer(model.parameters(), comm, "adam", stage=2, lr=1e-3)
    opt.zero_grad()
    loss = cross_entropy(model(x_local), y_local)   # no DataParallel: local gradients
    loss.backward()
    opt.step()                                      # 1-4 below: the same weights everywhere

Construction: the ranks agree on the call (:func:`agree`: the same error on
every rank if their parameters differ), rank 0's parameters are broadcast,
and each parameter's ``.data`` becomes a view of one flat vector. The shard
is a ``Parameter`` viewing rank r's slice of that vector, and the library's
optimiser (``minidist.optim``, one implementation of each rule) is given the
shard alone: its in-place update *is* an update of the model's weights.
Then each step:

1. pack: every local gradient, divided by P, into its slot of a flat
   gradient (a gradient that is None: zeros), so that the sum is the average;
2. communication: reduce-scatter: rank r receives shard r of the sum, the
   averaged gradient of its shard;
3. update: the library's optimiser steps the shard, with this shard's state;
4. communication: allgather: every rank's updated shard to every rank.

The two stages differ in what a rank keeps of the gradient:

- **stage 1** (optimiser state sharded, P_os): the whole flat gradient, a
  buffer of N values packed every step, as DDP keeps its buckets;
- **stage 2** (gradients sharded too, P_os+g): only its shard of the
  average; the flat gradient lives only until the reduce-scatter.

In both, ``p.grad`` is None after ``step()``: the optimiser has taken the
gradients into its flat buffer.

Cost per step, N values of b bytes, P ranks, ring collectives:

- bytes sent per rank: reduce-scatter (P-1)/P·N + allgather (P-1)/P·N =
  2(P-1)/P·N·b, the traffic of DDP's ring allreduce, which *is* a
  reduce-scatter and an allgather: ZeRO allgathers the updated parameters
  instead of the summed gradients. Exactly (:func:`bytes_sent_per_step`):
  the reduce-scatter sends every shard but rank r's own, N - n_r values; the
  allgather sends P-1 shards padded to the longest, S = ceil(N/P).
- values held per rank, parameters + gradients + optimiser state
  (:func:`values_held`, with n_r for N/P):

      DDP       N + N     + K·N         Adam: 4N
      ZeRO-1    N + N     + K·N/P       Adam: (2 + 2/P)N
      ZeRO-2    N + N/P   + K·N/P       Adam: (1 + 3/P)N

Training equals DDP's (and one process's on the global batch) when every
parameter gets a gradient each step. A parameter that no rank used in a
step is stepped with a zero gradient, which SGD with momentum and Adam still
move; DDP skips it. Frozen parameters are refused: pass the trainable ones.
Do not wrap the model in DataParallel as well (gradients averaged twice).

Checkpoints (``parallel.checkpoint``) save the state as one optimiser's over
the whole vector, gathered on rank 0, and every rank loads its shard of it
(``zero_checkpoint.py``).

Not done here, done by real systems: reducing bucket by bucket *during*
backward, which overlaps the communication (``overlap.py``) and lets stage 2
free each gradient once reduced (backward here still makes every ``p.grad``:
stage 2's saving is what a rank keeps from one step to the next); stage 3,
parameters sharded too and gathered layer by layer in forward and backward.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from minidist.autograd import Tensor
from minidist.backend import xp_of
from minidist.comm import Communicator, allgather, broadcast, chunk_bounds, reduce_scatter
from minidist.nn import Parameter
from minidist.optim import SGD, AdaGrad, Adam, Optimizer
from minidist.parallel.replicas import compare_descriptions, digest
from minidist.parallel.zero_checkpoint import load_whole_state, whole_state
from minidist.util.answers import lab_answer

OPTIMIZERS: dict[str, type[Optimizer]] = {"sgd": SGD, "adam": Adam, "adagrad": AdaGrad}
STAGES = (1, 2)


class ShardedOptimizer:
    """ZeRO over the ranks of ``comm``: ``ShardedOptimizer(params, comm, optimizer="adam",
    stage=1, **hyper)``, then ``zero_grad()`` and ``step()`` as any optimiser.

    ``optimizer``: a name of ``OPTIMIZERS`` or an ``Optimizer`` class of
    ``minidist.optim``, built on this rank's shard with the keyword arguments
    ``hyper`` (``lr``, ``momentum``, ``betas``...). ``param_groups`` are that
    optimiser's (a learning-rate schedule changes them as usual). A second
    ShardedOptimizer of the same parameters points them at its own vector:
    the first one no longer moves the model.

    Attributes: ``flat`` (the N parameters, which every ``p.data`` views),
    ``bounds`` (the shards), ``shard`` (this rank's, a ``Parameter``),
    ``optimizer`` (the library's optimiser of the shard), ``grad_buffer``
    (stage 1: the whole flat gradient; stage 2: None).
    """

    def __init__(self, params: Iterable[Tensor], comm: Communicator,
                 optimizer: str | type[Optimizer] = "adam", stage: int = 1,
                 **hyper: Any) -> None:
        if isinstance(params, Tensor):  # list(p) gives its rows, which get no gradients
            raise TypeError("ShardedOptimizer: params must be an iterable of Tensors: pass [p]")
        params = list(params)
        if not all(isinstance(p, Tensor) and p.requires_grad for p in params):
            raise TypeError("ShardedOptimizer: parameters must be Tensors with requires_grad="
                            "True (pass the trainable ones)")
        if len({id(p) for p in params}) != len(params):
            raise ValueError("ShardedOptimizer: a parameter appears twice in the list")
        name = optimizer if isinstance(optimizer, str) else getattr(optimizer, "__name__", "")
        agree(comm, params, stage, name)
        if isinstance(optimizer, str):
            if optimizer not in OPTIMIZERS:
                raise ValueError(f"ShardedOptimizer: optimizer must be one of "
                                 f"{list(OPTIMIZERS)} or an Optimizer class, got {optimizer!r}")
            optimizer = OPTIMIZERS[optimizer]
        self.params, self.comm, self.stage = params, comm, stage
        offsets = np.cumsum([0] + [p.size for p in params]).tolist()
        self.slots = list(zip(offsets[:-1], offsets[1:], strict=True))
        # communication: rank 0's parameters, as one flat vector, to every rank
        self.flat = broadcast(np.concatenate([np.ravel(p.data) for p in params]), comm)
        for p, (lo, hi) in zip(params, self.slots, strict=True):
            p.data = self.flat[lo:hi].reshape(p.shape)  # the model's weights view the vector
        self.bounds = chunk_bounds(len(self.flat), comm.size)
        lo, hi = self.bounds[comm.rank]
        self.shard = Parameter(self.flat[lo:hi])  # a view: updating it updates the model
        self.optimizer = optimizer([self.shard], **hyper)
        self.grad_buffer = np.zeros_like(self.flat) if stage == 1 else None
        self.scale = self.flat.dtype.type(1 / comm.size)  # a scalar of the buffer's dtype
        self._whole_state: dict[str, Any] | None = None  # consolidate_state_dict's

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def parameters(self) -> list[Tensor]:
        return list(self.params)

    def zero_grad(self) -> None:
        """Forget the gradients: every ``p.grad`` and the shard's averaged gradient."""
        for p in self.params:
            p.grad = None
        self.shard.grad = None

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collective: every shard's state joined on rank ``to`` (``zero_checkpoint.py``)."""
        self._whole_state = whole_state(self, to)

    def state_dict(self) -> dict[str, Any]:
        """The whole state, once, on the rank ``consolidate_state_dict`` gathered it to."""
        if self._whole_state is None:
            raise RuntimeError(f"rank {self.comm.rank}: a ShardedOptimizer holds one shard of "
                               "its state: call consolidate_state_dict(to) on every rank, "
                               "then state_dict() on rank to")
        state, self._whole_state = self._whole_state, None  # not kept: K·N values
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_whole_state(self, state)  # on every rank: its shard of the whole state

    @lab_answer("lab08_zero_step")
    def step(self) -> None:
        """Reduce-scatter the gradients, update this rank's shard, allgather the parameters."""
        lo, hi = self.bounds[self.comm.rank]
        # 1. pack: each local gradient, divided by P, into its slot (the sum is the average)
        flat_grad = self.grad_buffer if self.stage == 1 else np.empty_like(self.flat)
        for p, (start, stop) in zip(self.params, self.slots, strict=True):
            slot = flat_grad[start:stop].reshape(p.shape)
            if p.grad is None:
                slot[...] = 0  # unused by this rank: it contributes nothing
            elif getattr(p.grad, "shape", None) != p.data.shape:
                raise ValueError(f"a parameter of shape {p.data.shape} has a gradient of "
                                 f"shape {getattr(p.grad, 'shape', type(p.grad).__name__)}")
            else:
                np.multiply(p.grad, self.scale, out=slot)
            p.grad = None  # the gradient is in the flat buffer now
        # 2. communication: reduce-scatter: shard r of the sum over all ranks, to rank r
        average = reduce_scatter(flat_grad, self.comm, check=False)
        if self.stage == 1:  # kept in the whole-model buffer
            flat_grad[lo:hi] = average
            self.shard.grad = flat_grad[lo:hi]
        else:  # all a rank keeps of the gradient; flat_grad goes when this step returns
            self.shard.grad = average
        # 3. update: the library's optimiser moves the shard, i.e. this slice of the weights
        self.optimizer.step()
        # 4. communication: allgather: every rank's shard, padded to the longest, to every rank
        longest = self.bounds[0][1] - self.bounds[0][0]
        mine = xp_of(self.flat).zeros(longest, self.flat.dtype)  # where flat lives
        mine[:hi - lo] = self.shard.data
        shards = allgather(mine, self.comm, check=False)
        for (start, stop), row in zip(self.bounds, shards, strict=True):
            self.flat[start:stop] = row[:stop - start]


def agree(comm: Communicator, params: list[Tensor], stage: Any, optimizer: str) -> None:
    """Raise the same error on every rank unless every rank passes the same number, shapes
    and dtype of parameters, the same optimiser and a stage of ``STAGES``: each rank
    describes its call in a few integers, compared by one allgather
    (:func:`~minidist.parallel.replicas.compare_descriptions`).
    """
    dtypes = {np.dtype(p.dtype) for p in params}
    shapes = [tuple(p.shape) for p in params]
    description = {
        "tensors": len(params), "values": sum(p.size for p in params),
        "dtype": ord(dtypes.pop().char) if len(dtypes) == 1 else 0,
        "shapes": digest(shapes), "stage": stage if stage in STAGES else 0,
        "optimizer": digest(optimizer)}
    columns = list(description)
    table, field, differ = compare_descriptions(comm, description)
    bad = [rank for rank, row in enumerate(table) if row[columns.index("stage")] == 0]
    if bad:
        raise ValueError(f"ZeRO stage must be one of {STAGES}; rank(s) {bad} passed another "
                         f"(this rank: {stage!r})")
    if field is not None:
        if field in ("shapes", "optimizer"):  # digests: only this rank's own value is known
            shown = "this rank's: " + (optimizer if field == "optimizer" else repr(shapes))
        else:
            shown = ", ".join(f"rank {r}: {_describe(field, row[columns.index(field)])}"
                              for r, row in enumerate(table))
        raise ValueError(f"ShardedOptimizer: every rank must pass the same parameters and "
                         f"optimiser, but rank(s) {differ} differ from rank 0 in their "
                         f"{field} ({shown})")
    if table[0][0] == 0:
        raise ValueError("ShardedOptimizer got an empty parameter list")
    if table[0][2] == 0:
        raise TypeError(f"ShardedOptimizer: the parameters must share one dtype (one flat "
                        f"vector), got {sorted(str(p.dtype) for p in params)}")


def _describe(field: str, value: int) -> str:
    if field != "dtype":
        return str(value)
    return str(np.dtype(chr(value))) if value else "mixed dtypes"


# ---- what a rank holds and sends: counted, and by the formula -----------------------------

def bytes_held(params: list[Tensor], optimizer: Optimizer | ShardedOptimizer) -> dict[str, int]:
    """Bytes of the model states a rank keeps, counted from its arrays: ``parameters``
    (each ``p.data``), ``gradients`` (each ``p.grad``; a ShardedOptimizer's buffer and
    shard gradient) and ``optimizer_state`` (the optimiser's state arrays).

    Each block of memory counts once, whole: a view counts as the array it
    views (so DDP's bucket flags count as gradients). Measure after
    ``step()``, when everything a step needs exists; activations are not
    model states (``md.autograd.saved_bytes`` counts those).
    """
    inner, grads = optimizer, [p.grad for p in params]
    if isinstance(optimizer, ShardedOptimizer):
        inner = optimizer.optimizer
        grads += [optimizer.grad_buffer, optimizer.shard.grad]
    state = [value for entry in inner.state.values() for value in entry.values()]
    return dict(parameters=owned_bytes([p.data for p in params]), gradients=owned_bytes(grads),
                optimizer_state=owned_bytes(state))


def owned_bytes(arrays: Iterable[Any]) -> int:
    """Bytes of the memory behind ``arrays`` (anything not an array is skipped), each
    block once: an array that views another counts as the one that owns the memory."""
    owners: dict[int, int] = {}
    for a in arrays:
        if not hasattr(a, "nbytes"):
            continue
        while hasattr(getattr(a, "base", None), "nbytes"):
            a = a.base
        owners[id(a)] = a.nbytes
    return sum(owners.values())


def values_held(n: int, p: int, rank: int, stage: int, states: int) -> dict[str, int]:
    """The formula: values of parameters, gradients and optimiser state that ``rank`` holds
    with N = ``n`` parameters, ``states`` (K) optimiser values per parameter; ``stage`` 0 is
    DDP (nothing sharded; its buckets add one flag per tensor to the gradients)."""
    lo, hi = chunk_bounds(n, p)[rank]
    shard = hi - lo if stage else n
    return dict(parameters=n, gradients=shard if stage == 2 else n,
                optimizer_state=states * shard)


def bytes_sent_per_step(n: int, p: int, rank: int, itemsize: int) -> int:
    """The formula: bytes ``rank`` sends in one ZeRO step (stage 1 or 2) of ``n`` values:
    the reduce-scatter's N - n_r, the allgather's (P-1)·S, S = ceil(N/P)."""
    bounds = chunk_bounds(n, p)
    lo, hi = bounds[rank]
    return (n - (hi - lo) + (p - 1) * (bounds[0][1] - bounds[0][0])) * itemsize
