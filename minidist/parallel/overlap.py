"""What makes DataParallel fast, explained once: overlap, a communication thread, no extra pass.

The lesson (Lab 4, Task 2; ``buckets.py``) averages after backward: for each
bucket, 1. pack, communication: allreduce, 2. unpack. The :class:`Reducer`
runs the same phases, each as early as it can, with three mechanisms:

- **Overlap ordering.** Backward finishes the gradients last layer first
  (``autograd/engine.py`` says why its walk does), the plan fills the
  buckets in that order, and a hook on each parameter packs its gradient
  the moment it is final. A bucket whose gradients are all in is
  complete and is allreduced at once, while backward still computes the
  earlier layers. Buckets leave strictly in plan order on every rank (a
  complete bucket waits for the earlier ones): allreduces are matched by
  their order, so another order on two ranks would pair the wrong buffers
  or hang.
- **One communication thread** per reducer runs those allreduces: numpy's
  products and MPI's calls release Python's lock, so backward and
  communication really run at once. It talks on a communicator of its own
  (``comm.split``), so its messages never meet the user's. On one host,
  communication is the CPU copying memory (and MPI spinning while it
  waits): overlap pays off when each rank has a core to spare. When
  backward ends, the buckets still waiting have nothing left to hide
  behind: they are reduced on the training thread, with no hand-over.
- **No pass that is not needed.** Each gradient enters its bucket already
  divided by P (``Bucket(scale=1/P)``: the copy and the division are one
  pass), so the sum over the ranks *is* the average, and unpacking makes
  each ``p.grad`` a view of its slot (PyTorch's ``gradient_as_bucket_view``):
  nothing is divided or copied after the allreduce. Dividing before the sum
  instead of after it changes the result by at most a rounding. Keep a copy
  of ``p.grad`` if you need it after the next synchronised backward, which
  refills the bucket.

End of backward: a callback queued on the autograd engine packs what never
arrived (unused parameters, sums accumulated under ``no_sync``), waits for
the thread, reduces the rest and unpacks every bucket. A backward that raises
instead (a user's check in a custom ``Function``, caught, the batch skipped)
never gets there: ``abandon`` drops its step without a message, and the next
backward starts afresh and averages as usual.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from minidist.autograd import Function, Tensor, queue_callback
from minidist.comm import Communicator
from minidist.parallel.buckets import Bucket
from minidist.parallel.timing import TraceRecorder
from minidist.util.answers import lab_answer

_REDUCER_OF: weakref.WeakValueDictionary[int, Reducer] = weakref.WeakValueDictionary()


class Reducer:
    """Averages the gradients of ``groups`` (one list of parameters per bucket, in plan
    order) over the ranks of ``comm`` during each backward; see the module docstring.

    A parameter belongs to one reducer at a time: a new reducer of the same
    parameters (a notebook cell that wraps the model again) removes the
    earlier one's hooks, so each gradient is still averaged once.
    """

    @lab_answer("lab04")
    def __init__(self, groups: list[list[Tensor]], comm: Communicator, algorithm: str,
                 overlap: bool, recorder: TraceRecorder | None) -> None:
        self.algorithm, self.recorder = algorithm, recorder
        self.overlap = overlap and threads_allowed(comm)
        self.clock: Callable[[], float] = recorder.clock if recorder else time.perf_counter
        # communication: a communicator of our own, so bucket traffic never meets the user's
        self.comm = comm.split(0, comm.rank)
        self.buckets = [Bucket(params, scale=1 / comm.size) for params in groups]
        self._where = {id(p): (k, position) for k, bucket in enumerate(self.buckets)
                       for position, p in enumerate(bucket.params)}
        earlier = {id(r): r for p in self._params() if (r := _REDUCER_OF.get(id(p))) is not None}
        for reducer in earlier.values():
            reducer.detach()
        me = weakref.ref(self)  # the model's tensors must not keep the reducer alive
        removers = [p.register_grad_hook(lambda tensor: _call(me, "grad_ready", tensor))
                    for p in self._params()]
        self._hooks = weakref.finalize(self, _remove_all, removers)  # removed when collected
        _REDUCER_OF.update((id(p), self) for p in self._params())

        self.sync = True  # False under DataParallel.no_sync: local accumulation only
        self._step_open = False  # an end-of-backward callback is queued
        self._next_bucket = 0  # buckets before it have been launched
        self._worker: threading.Thread | None = None
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._comm_spans: list[tuple[float, float]] = []
        self._forward_start: float | None = None
        self._error: BaseException | None = None
        self.last_step_stats: dict[str, float] = {}

    def _params(self) -> list[Tensor]:
        return [p for bucket in self.buckets for p in bucket.params]

    def detach(self) -> None:
        """Remove this reducer's hooks: backward no longer averages for it."""
        self._hooks()

    @property
    def detached(self) -> bool:
        return not self._hooks.alive

    # ---- forward and backward ------------------------------------------------------------

    def forward_started(self) -> None:
        """The step's compute begins (for ``last_step_stats`` and the recorder)."""
        if self._forward_start is None:
            self._forward_start = self.clock()

    def watch(self, out: Any) -> Any:
        """Mark the model's output, so that a backward through it ends by averaging."""
        if isinstance(out, Tensor):
            return _BackwardEntry.apply(out, reducer=self)
        if isinstance(out, tuple | list):
            return type(out)(self.watch(o) if isinstance(o, Tensor) else o for o in out)
        return out

    def begin_step(self) -> None:
        """First event of a synchronised backward: arrange for ``finish`` at its end
        (``abandon`` if it raises)."""
        if self.sync and not self._step_open:
            # buckets an abandoned step handed to the communication thread finish before
            # their buffers are packed again (after a finished step, nothing is left)
            self._queue.join()
            self._step_open, self._error = True, None
            self._comm_spans = []
            queue_callback(self.finish, on_error=self.abandon)

    def abandon(self) -> None:
        """Backward raised before its end: drop this step, sending nothing more, so that
        the next backward packs, reduces and averages afresh. The ranks stay matched
        when every rank's backward raised at the same point (a check that fails
        everywhere); a rank that raised alone leaves the others waiting in an
        allreduce, as any rank that stops does."""
        self._next_bucket, self._step_open, self._forward_start = 0, False, None
        for bucket in self.buckets:
            bucket.packed.clear()

    def grad_ready(self, param: Tensor) -> None:
        """A hook: ``param.grad`` is final for this backward."""
        if not self.sync:
            return
        self.begin_step()
        k, position = self._where[id(param)]
        # 1. pack, as soon as the gradient exists
        self.buckets[k].pack(position, param.grad)
        # then launch, in bucket order, every bucket that is complete
        while (self._next_bucket < len(self.buckets)
               and self.buckets[self._next_bucket].complete):
            if self.overlap:
                self._hand_over(self._next_bucket)
            self._next_bucket += 1

    def _hand_over(self, k: int) -> None:
        if self._worker is None:  # started once; it ends when the reducer is collected
            self._worker = threading.Thread(target=_serve, daemon=True,
                                            args=(weakref.ref(self), self._queue),
                                            name=f"minidist-ddp-comm-{self.comm.rank}")
            self._worker.start()
            weakref.finalize(self, self._queue.put, None)
        self._queue.put(k)

    def reduce_on_thread(self, k: int) -> None:
        """On the communication thread: reduce bucket ``k``, keep an error for ``finish``."""
        if self._error is None:
            try:
                self._reduce(k, lane="comm")
            except BaseException as err:  # re-raised on the training thread in finish
                self._error = err

    def _reduce(self, k: int, lane: str) -> None:
        start = self.clock()
        self.buckets[k].allreduce(self.comm, self.algorithm)  # communication: the bucket
        end = self.clock()
        self._comm_spans.append((start, end))
        if self.recorder is not None:
            origin = self.recorder.origin
            self.recorder.add("comm", start - origin, end - origin, lane)

    def finish(self) -> None:
        """End of backward: send what is left, wait for every bucket, unpack the averages."""
        backward_end = self.clock()
        try:
            for bucket in self.buckets[self._next_bucket:]:
                bucket.pack_missing()  # 1. unused this step, or accumulated under no_sync
            self._queue.join()  # every bucket handed to the communication thread is done
            # Buckets still here have no backward left to hide behind: reduce them on this
            # thread, after the communication thread's, so the order stays the same.
            for k in range(self._next_bucket if self.overlap else 0, len(self.buckets)):
                if self._error is None:
                    self._reduce(k, lane="main")
            if self._error is not None:
                error, self._error = self._error, None
                raise RuntimeError("DataParallel: a gradient allreduce failed") from error
            for bucket in self.buckets:
                bucket.unpack()  # 2. each p.grad is now its slot: the average
        finally:  # whatever happened, the next backward starts afresh
            self._next_bucket, self._step_open = 0, False
            for bucket in self.buckets:
                bucket.packed.clear()
        self._record_stats(backward_end, self.clock() - backward_end)

    def _record_stats(self, backward_end: float, waited: float) -> None:
        """How much communication ran while backward still computed (``last_step_stats``)."""
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
    def forward(ctx, x, reducer: Reducer):
        ctx.reducer = reducer
        return x

    @staticmethod
    def backward(ctx, grad):
        ctx.reducer.begin_step()
        return grad


def threads_allowed(comm: Communicator) -> bool:
    """A background thread may call MPI only if MPI was started with thread support; the
    in-process transport's ranks are cooperative tasks of one thread, which another
    thread cannot join: there buckets are reduced at the end of backward."""
    if getattr(comm, "mpi_comm", None) is None:
        return False
    from mpi4py import MPI

    return MPI.Query_thread() >= MPI.THREAD_SERIALIZED


def _serve(ref: weakref.ref, jobs: queue.Queue) -> None:
    """The communication thread: allreduce queued buckets, first in first out. It holds
    the reducer only weakly, and stops at ``None`` (queued when the reducer is collected)."""
    while (k := jobs.get()) is not None:
        reducer = ref()
        if reducer is not None:
            reducer.reduce_on_thread(k)
        del reducer
        jobs.task_done()


def _call(ref: weakref.ref, method: str, *args: Any) -> None:
    target = ref()
    if target is not None:
        getattr(target, method)(*args)


def _remove_all(removers: list[Callable[[], None]]) -> None:
    for remove in removers:
        remove()
