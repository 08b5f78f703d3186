"""Data parallelism (Lecture 4, Lab 4): replicate the model, split the batch, average the gradients.

P ranks hold identical copies of the model. Each step, each rank runs forward
and backward on its own b samples; the ranks then *average* their gradients
with an allreduce, so every rank holds the gradient of the whole batch of
P·b samples and applies the same update: the replicas stay identical, and
training computes exactly what one process with batch P·b would.

    model = DataParallel(build_mlp(), comm)        # 1. rank 0's weights, everywhere
    opt = Adam(model.parameters(), lr=1e-3)
    loss = cross_entropy(model(x_local), y_local)
    loss.backward()                                # 2. gradients averaged when it returns
    opt.step()                                     # 3. the same update on every rank

The wrapper is Lab 4's answers put together:

1. construction: the trainable parameters planned into buckets, last first
   (Task 2: :func:`~minidist.parallel.buckets.plan_buckets`), the ranks
   agreed on the model and the plan (else the same error on every rank:
   :func:`~minidist.parallel.replicas.check_same_model`), and rank 0's
   parameters copied to every rank (Task 3, step 1:
   :func:`~minidist.parallel.replicas.broadcast_parameters`);
2. each backward: every bucket packed, summed with one allreduce and
   unpacked as the average (Task 2), so that when ``backward()`` returns each
   ``p.grad`` is its mean over the ranks (Task 1);
3. the optimiser's step, the same on every rank (Task 3).

Step 2 runs *during* backward, not after it: the
:class:`~minidist.parallel.overlap.Reducer` does it, and ``overlap.py`` is
where everything that only makes it fast is explained.

**Parameters without a gradient** (the rule gives one process's answer and
never hangs, because every rank always sends every bucket):

- *frozen* (``requires_grad`` False when wrapped): left out of the buckets,
  never communicated; their ``.grad`` is never touched;
- *unused this step* on a rank: that rank contributes zeros (the mean over
  the global batch counts its samples as contributing nothing) and a flag 0;
  if no rank used it, ``.grad`` stays None everywhere, as in one process,
  so optimisers skip it. Its bucket (and every later one) can only leave at
  the end of backward: an unused parameter costs overlap, not correctness.

``no_sync()``: backward inside it only accumulates local gradients; the
first backward outside averages the accumulated sums (gradient
accumulation: k small batches per update at the cost of one allreduce).

**Wrapping again** (a notebook cell run twice): the new wrapper takes the
parameters over and the old one stops averaging (using it raises), so each
gradient is averaged once, not twice.

Cost per step, N bytes of gradients in K buckets, ring allreduce:
``2(P-1)/P·N`` bytes sent per rank, ``2(P-1)·K`` message latencies; the
part that runs while backward still computes is hidden (see
``last_step_stats``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from numbers import Real
from typing import Any

from minidist.autograd import is_grad_enabled
from minidist.comm import ALGORITHMS, Communicator
from minidist.nn.module import Module
from minidist.parallel.buckets import MB, Bucket, plan_buckets
from minidist.parallel.overlap import Reducer
from minidist.parallel.replicas import broadcast_parameters, check_same_model
from minidist.parallel.timing import TraceRecorder
from minidist.util.answers import lab_answer


class DataParallel(Module):
    """Wraps ``module`` so that backward averages its gradients over the ranks of ``comm``.

    Buckets hold ``bucket_mb`` MB, the first one ``first_bucket_mb`` (small, so
    that it leaves early). ``algorithm`` is any allreduce of
    ``minidist.comm.ALGORITHMS``. ``overlap=False`` reduces every bucket after
    backward, on the calling thread (a baseline for measuring overlap; also
    chosen when MPI was started without thread support). ``recorder``
    receives each step's intervals on its clock (see ``timing.py``): compute
    from the first forward to the end of backward, each bucket's
    communication, the wait after backward.

    After each synchronised backward ``last_step_stats`` holds ``buckets``,
    ``bytes`` (sent per allreduce input, flags included), ``compute_seconds``
    (first forward to end of backward), ``comm_seconds`` (the buckets'
    allreduces, summed, waits for slower ranks inside them included),
    ``overlapped_seconds`` (the part of them before backward ended),
    ``overlap_fraction`` (their ratio: the share of communication hidden) and
    ``wait_seconds`` (end of backward until the averaged gradients are in place).
    """

    def __init__(self, module: Module, comm: Communicator, bucket_mb: float = 25,
                 first_bucket_mb: float = 1, algorithm: str = "ring", overlap: bool = True,
                 recorder: TraceRecorder | None = None) -> None:
        super().__init__()
        problem = _settings_problem(algorithm, bucket_mb, first_bucket_mb)
        self.module, self.comm = module, comm
        # 1. buckets of the trainable parameters, last first (frozen ones never travel),
        # the same on every rank, as the model is (or the same error on every rank: bad
        # settings on one rank too, which that rank names)
        trainable = [p for p in module.parameters() if p.requires_grad]
        plan = None if problem else plan_buckets(trainable, bucket_mb * MB, first_bucket_mb * MB)
        try:
            check_same_model(module, comm, "DataParallel", algorithm=algorithm,
                             **{"bucket plan (bucket_mb, first_bucket_mb)": plan})
        except ValueError as err:
            raise ValueError(f"{err}; here: {problem}" if problem else str(err)) from None
        if problem:
            raise ValueError(problem)
        # 2. the same start everywhere: rank 0's parameters, frozen ones too
        broadcast_parameters(module, comm)
        # 3. each backward packs, allreduces and unpacks them while it runs (overlap.py)
        self.reducer = Reducer([[trainable[i] for i in group] for group in plan], comm,
                               algorithm, overlap, recorder)

    @property
    def buckets(self) -> list[Bucket]:
        return self.reducer.buckets

    @property
    def last_step_stats(self) -> dict[str, float]:
        return self.reducer.last_step_stats

    @lab_answer("lab04")
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.reducer.detached:
            raise RuntimeError("this DataParallel no longer averages gradients: its module was "
                               "wrapped again by a newer DataParallel; use that one")
        if is_grad_enabled():
            self.reducer.forward_started()
        return self.reducer.watch(self.module(*args, **kwargs))

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward inside the block accumulates local gradients without communicating."""
        previous, self.reducer.sync = self.reducer.sync, False
        try:
            yield
        finally:
            self.reducer.sync = previous


def _settings_problem(algorithm: object, bucket_mb: object, first_bucket_mb: object) -> str:
    """What is wrong with DataParallel's settings ("" if nothing)."""
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        return f"unknown allreduce algorithm {algorithm!r}; use one of {list(ALGORITHMS)}"
    for name, size in (("bucket_mb", bucket_mb), ("first_bucket_mb", first_bucket_mb)):
        if isinstance(size, bool) or not isinstance(size, Real) or not size >= 0:  # NaN too
            return f"{name} must be a number of MB >= 0 (inf: one bucket), got {size!r}"
    return ""
