"""Data parallelism (Lecture 4): replicate the model, split the batch, average the gradients.

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

How :class:`DataParallel` makes step 2 fast, as PyTorch's DDP does:

- **Buckets** (``buckets.py``): gradients travel in a few flat buffers of
  ~``bucket_mb`` MB instead of one message per tensor, filled in reverse
  registration order (the order backward produces them), the first one
  small (``first_bucket_mb``) so it can leave early.
- **Overlap**: a gradient hook per parameter marks it ready; when a bucket
  is complete it is queued to a background *communication thread* that
  allreduces it while backward computes the earlier layers (numpy's matrix
  products and MPI's calls release Python's lock, so both really run at
  once). The thread talks on its own communicator (``comm.split``): its
  messages never mix with the user's. On one host, communication is the CPU
  copying memory (and MPI spinning while it waits): overlap pays off when
  each rank has a core to spare (``python -m minidist.bench.ddp`` shows it).
- **End of backward**: a callback queued on the autograd engine waits for
  the thread, reduces the buckets that were not complete before backward
  ended (nothing is left to overlap them with, so no hand-over to the
  thread), and makes each ``p.grad`` a view of its slot in the bucket.
- **No pass that is not needed**: each gradient enters its bucket already
  divided by P (the copy and the scaling are one pass), so the sum over
  ranks *is* the average, and ``p.grad`` is the bucket's memory itself
  (PyTorch's ``gradient_as_bucket_view``): nothing is divided or copied
  after the allreduce. Keep a copy of ``p.grad`` if you need it after the
  next synchronised backward, which refills the bucket.

Buckets are launched strictly in bucket order on every rank (a complete
bucket waits for the earlier ones): allreduces are matched by their order,
so a different order on two ranks would pair the wrong buffers or hang.

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

Cost per step, N bytes of gradients in K buckets, ring allreduce:
``2(P-1)/P·N`` bytes sent per rank, ``2(P-1)·K`` message latencies; the
part that runs while backward still computes is hidden (see
``last_step_stats``).
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from minidist.autograd import Function, Tensor, is_grad_enabled, queue_callback
from minidist.comm.allreduce import ALGORITHMS, allreduce
from minidist.comm.communicator import Communicator
from minidist.nn.module import Module
from minidist.parallel.buckets import Bucket, plan_buckets
from minidist.parallel.replicas import broadcast_parameters
from minidist.parallel.timing import TraceRecorder


class DataParallel(Module):
    """Wraps ``module`` so that backward averages its gradients over the ranks of ``comm``.

    ``algorithm`` is any allreduce of ``minidist.comm.allreduce.ALGORITHMS``.
    ``overlap=False`` reduces every bucket after backward, on the calling
    thread (a baseline for measuring overlap; also chosen when MPI was
    started without thread support). ``recorder`` receives each
    step's intervals (see ``timing.py``): compute from the first forward to
    the end of backward, each bucket's communication, the wait after backward.

    After each synchronised backward ``last_step_stats`` holds ``buckets``,
    ``bytes`` (sent per allreduce input, flags included), ``compute_seconds``
    (first forward to end of backward), ``comm_seconds`` (the buckets'
    allreduces, summed, waits for slower ranks inside them included),
    ``overlapped_seconds`` (the part of them before
    backward ended), ``overlap_fraction`` (their ratio: the share of
    communication hidden) and ``wait_seconds`` (end of backward until the
    averaged gradients are in place).
    """

    def __init__(self, module: Module, comm: Communicator, bucket_mb: float = 25,
                 first_bucket_mb: float = 1, algorithm: str = "ring", overlap: bool = True,
                 recorder: TraceRecorder | None = None) -> None:
        super().__init__()
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown allreduce algorithm {algorithm!r}; "
                             f"use one of {list(ALGORITHMS)}")
        self.module = module
        self.comm, self.algorithm, self.recorder = comm, algorithm, recorder
        self.overlap = overlap and _threads_allowed(comm)
        broadcast_parameters(module, comm)
        # communication: a communicator of our own, so bucket traffic never meets the user's
        self.reducer_comm = comm.split(0, comm.rank)

        trainable = [p for p in module.parameters() if p.requires_grad]  # frozen: left out
        plan = plan_buckets(trainable, bucket_mb, first_bucket_mb)
        # each gradient enters its bucket divided by P: the sum over ranks is the average
        self.buckets = [Bucket([trainable[i] for i in group], 1 / comm.size) for group in plan]
        self._where = {id(p): (k, position) for k, bucket in enumerate(self.buckets)
                       for position, p in enumerate(bucket.params)}
        me = weakref.ref(self)  # the model's tensors must not keep the wrapper alive
        for p in trainable:
            p.register_grad_hook(lambda tensor: _call(me, "_on_grad_ready", tensor))

        self._sync = True
        self._step_open = False  # an end-of-backward callback is queued
        self._next_bucket = 0  # buckets before it have been launched
        self._worker: threading.Thread | None = None
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._comm_spans: list[tuple[float, float]] = []
        self._forward_start: float | None = None
        self._error: BaseException | None = None
        self.last_step_stats: dict[str, float] = {}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._forward_start is None and is_grad_enabled():
            self._forward_start = time.perf_counter()
        out = self.module(*args, **kwargs)
        if isinstance(out, Tensor):
            return _BackwardEntry.apply(out, ddp=self)
        if isinstance(out, tuple | list):
            return type(out)(_BackwardEntry.apply(o, ddp=self) if isinstance(o, Tensor) else o
                             for o in out)
        return out

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward inside the block accumulates local gradients without communicating."""
        previous, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = previous

    # ---- during backward: hooks fire as gradients become final --------------------------

    def _begin_step(self) -> None:
        """First event of a synchronised backward: arrange for ``_finish`` at its end."""
        if self._sync and not self._step_open:
            self._step_open = True
            self._comm_spans = []
            queue_callback(self._finish)

    def _on_grad_ready(self, param: Tensor) -> None:
        if not self._sync:
            return
        self._begin_step()
        k, position = self._where[id(param)]
        self.buckets[k].put(position, param.grad)
        self._launch_complete_buckets()

    def _launch_complete_buckets(self) -> None:
        """Launch, in bucket order, every bucket that is complete (stop at the first that isn't)."""
        while (self._next_bucket < len(self.buckets)
               and self.buckets[self._next_bucket].complete):
            self._launch(self._next_bucket)
            self._next_bucket += 1

    def _launch(self, k: int) -> None:
        if not self.overlap:
            return  # reduced in _finish, after backward
        if self._worker is None:  # started once; it ends when the wrapper is collected
            self._worker = threading.Thread(target=_serve, daemon=True,
                                            args=(weakref.ref(self), self._queue),
                                            name=f"minidist-ddp-comm-{self.comm.rank}")
            self._worker.start()
            weakref.finalize(self, self._queue.put, None)
        self._queue.put(k)

    def _reduce_queued(self, k: int) -> None:
        """On the communication thread: reduce bucket ``k``, keep an error for ``_finish``."""
        if self._error is None:
            try:
                self._reduce(k, lane="comm")
            except BaseException as err:  # re-raised on the training thread in _finish
                self._error = err

    def _reduce(self, k: int, lane: str) -> None:
        bucket = self.buckets[k]
        start = time.perf_counter()
        # communication: sum this bucket over all ranks, in place (same order on every rank)
        allreduce(bucket.buffer, self.reducer_comm, "sum", self.algorithm,
                  out=bucket.buffer, check=False)
        end = time.perf_counter()
        self._comm_spans.append((start, end))
        if self.recorder is not None:
            origin = self.recorder.origin
            self.recorder.add("comm", start - origin, end - origin, lane)

    # ---- end of backward -----------------------------------------------------------------

    def _finish(self) -> None:
        """Send what is left, wait for every bucket, write the averages into ``p.grad``."""
        backward_end = time.perf_counter()
        try:
            for bucket in self.buckets[self._next_bucket:]:
                bucket.fill_missing()  # unused this step, or only accumulated under no_sync
            self._queue.join()  # every bucket given to the communication thread is done
            # Buckets still here have no backward left to hide behind: reduce them on this
            # thread (after the communication thread's, so the order stays the same).
            for k in range(self._next_bucket if self.overlap else 0, len(self.buckets)):
                if self._error is None:
                    self._reduce(k, lane="main")
        finally:  # whatever happened, the next backward starts afresh
            self._next_bucket, self._step_open = 0, False
            for bucket in self.buckets:
                bucket.ready.clear()
        waited = time.perf_counter() - backward_end
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("DataParallel: a gradient allreduce failed") from error
        for bucket in self.buckets:
            bucket.write_back()
        self._record_stats(backward_end, waited)

    def _record_stats(self, backward_end: float, waited: float) -> None:
        """How much communication ran while backward still computed (see ``last_step_stats``)."""
        total = sum(end - start for start, end in self._comm_spans)
        hidden = sum(max(0.0, min(end, backward_end) - start) for start, end in self._comm_spans)
        began = backward_end if self._forward_start is None else self._forward_start
        self._forward_start = None
        self.last_step_stats = dict(
            buckets=len(self.buckets), bytes=sum(b.nbytes for b in self.buckets),
            compute_seconds=backward_end - began, comm_seconds=total, overlapped_seconds=hidden,
            overlap_fraction=hidden / total if total > 0 else 0.0, wait_seconds=waited)
        if self.recorder is not None:
            origin = self.recorder.origin
            self.recorder.add("compute", began - origin, backward_end - origin, "main")
            if self.overlap:  # without overlap, the main lane's comm intervals fill this time
                self.recorder.add("wait", backward_end - origin, backward_end + waited - origin)


class _BackwardEntry(Function):
    """Identity on the model's output; its backward (the first inside the model) makes sure
    the end-of-backward callback is queued even if no parameter gets a gradient here."""

    @staticmethod
    def forward(ctx, x, ddp: DataParallel):
        ctx.ddp = ddp
        return x

    @staticmethod
    def backward(ctx, grad):
        ctx.ddp._begin_step()
        return grad


def _threads_allowed(comm: Communicator) -> bool:
    """A background thread may call MPI only if MPI was started with thread support."""
    if getattr(comm, "mpi_comm", None) is None:
        return True
    from mpi4py import MPI

    return MPI.Query_thread() >= MPI.THREAD_SERIALIZED


def _serve(ref: weakref.ref, jobs: queue.Queue) -> None:
    """The communication thread: allreduce queued buckets, first in first out. It holds
    the wrapper only weakly, and stops at ``None`` (queued when the wrapper is collected)."""
    while (k := jobs.get()) is not None:
        ddp = ref()
        if ddp is not None:
            ddp._reduce_queued(k)
        del ddp
        jobs.task_done()


def _call(ref: weakref.ref, method: str, *args: Any) -> None:
    target = ref()
    if target is not None:
        getattr(target, method)(*args)
