"""One server rank: it holds a key range, answers pushes and pulls, and keeps the clocks.

A server's loop, per request:

1. **Listen**: one request receive is posted for every worker still
   running, so whichever speaks next is heard (its header, and its payload
   if short: ``messages.py``, the small-message path).
2. **Choose** the next request. Under MPI: whichever arrives first
   (``wait_any``). On the in-process transport (deterministic order, the
   default there): wait until every listening worker has spoken, then take
   the request begun first on the modelled clock (the header's timestamp;
   ties by worker), reading the headers without receiving them
   (``LocalCommunicator.peek``), so that waiting costs no modelled time: the
   order in which a real network would have delivered them, the same on
   every run and on every server (each sees every request, ``worker.py``).
   A worker whose read is parked sends nothing until it is answered
   (``worker.py``), so it is not waited for.
3. **Handle** it:
   - PUSH: take the rows (received with the header, or after it); its
     staleness τ = 1 + the updates applied since the pull its gradient was
     computed from (``rules.py``); apply the update (``ShardState.apply``),
     or add it to n-softsync's accumulator and apply the average once c
     have come; acknowledge with the version. Under BSP the push is held
     (and acknowledged) until every running worker has finished its
     iteration, then applied in the order the requests began (worker order
     under MPI): step 4. A BSP run is then the same on every run and MPI.
   - PULL: take the keys; answer with the version and the rows if the
     consistency rule allows a read at the worker's clock, else park it.
   - PUSH_PULL: a training step's three requests in one: the PUSH (not
     acknowledged), then the CLOCK (its iteration is over), then the PULL of
     the same keys at the new clock, whose answer it waits for.
   - CLOCK: the worker finished an iteration: record its clock.
   - CHECKPOINT: the worker waits at a checkpoint: once every running
     worker has asked at the same clock, save the shard, then answer them.
   - STOP: the worker is done; it no longer counts in the clocks, nor in
     n-softsync's c (an update then averages the gradients of those left).
4. **Apply** BSP's held pushes whose iteration every worker has finished;
   **unpark** the reads the clocks now allow, by worker.

A worker that ends without STOP (its receive raises: the rank failed or
finished) is dropped from the clocks with a message naming it, and the
others go on. The in-process transport tells it, and so does an MPI with
fault tolerance (ULFM: Open MPI's ``mpiexec --with-ft ulfm``), whose
receives then raise ``PeerFailed``. Under any other MPI a process that dies
ends the whole job, and the run resumes from its last checkpoint. MPICH
(the pip wheel, 5.0) offers no way on (README, "Parameter servers").

Cost per request, for k keys holding v values of b bytes, on the server:
a PUSH receives 48 + 8k + b·v B (one message, or two when the payload is
over ``INLINE_BYTES``) and sends 8 B; a PULL receives 48 + 8k B and sends
8 + b·v B (a request with k = 0, for keys other servers hold: the header
and an 8 B answer); a PUSH_PULL receives a push's and sends a pull's
answer; CLOCK and STOP a 48 B message each. Work: O(v) per push or pull.
"""

from __future__ import annotations

import sys
from collections import Counter
from functools import partial

import numpy as np

from minidist.comm.errors import CommError, PeerFailed
from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator
from minidist.parallel.ps.checkpoint import refuse_to_save, save_shard
from minidist.parallel.ps.consistency import Consistency, HeldPushes, StalenessLog
from minidist.parallel.ps.keys import KeyLayout, common_width
from minidist.parallel.ps.messages import (
    HEADER_BYTES,
    INLINE_BYTES,
    Header,
    Kind,
    Listening,
    receive_payload,
)
from minidist.parallel.ps.plans import FramedShard, LastKeys
from minidist.parallel.ps.reports import ServerReport
from minidist.parallel.ps.rules import ServerOptimizer, ShardState, SoftSync


class Server:
    """Server ``server`` of a parameter server: the keys ``key_range`` of ``layout``.

    ``workers`` are the workers' ranks in ``c``; ``softsync``: n of n-softsync
    (None: every gradient is an update); ``checkpoint_path``: where CHECKPOINT
    requests save the shard.
    """

    def __init__(self, c: Communicator, layout: KeyLayout, server: int,
                 key_range: tuple[int, int], workers: list[int], optimizer: ServerOptimizer,
                 rule: Consistency, softsync: int | None, deterministic: bool,
                 dtype: np.dtype, checkpoint_path: str | None = None, clock: int = 0) -> None:
        self.c, self.layout, self.server, self.key_range = c, layout, server, key_range
        self.workers, self.optimizer, self.rule = workers, optimizer, rule
        self.softsync, self.deterministic, self.dtype = softsync, deterministic, dtype
        self.checkpoint_path = checkpoint_path
        self.clocks = {w: clock for w in range(len(workers))}  # running workers' clocks
        self.parked: dict[int, tuple[int, np.ndarray]] = {}  # worker -> its read (clock, keys)
        self.at_checkpoint: dict[int, Header] = {}
        self.held = HeldPushes()  # BSP's pushes, until the barrier
        self.log, self.requests, self.dropped = StalenessLog(), Counter(), []
        # the shard as rows when they have one width (rules.py), and where a worker's keys
        # lie in it, kept for its next request (plans.py)
        self.width = common_width(layout.widths[key_range[0]:key_range[1]])
        index = partial(layout.value_index, base=key_range[0], width=self.width)
        self.index_of = {w: LastKeys(index) for w in self.clocks}
        # where a worker's next request lands: filled only once its last one is handled
        self.inbox = {w: np.empty(HEADER_BYTES + INLINE_BYTES, np.uint8) for w in self.clocks}

    def serve(self, shard: ShardState) -> ServerReport:
        """Run until every worker has stopped or gone, updating ``shard`` (this server's
        values and optimiser state)."""
        first, end = self.key_range
        self.shard = shard
        # the same values, behind 8 free bytes: a read from the shard's first value on is
        # answered where it lies (plans.py)
        self.framed = FramedShard(shard.values, self.width)
        shard.values = self.framed.values
        shard.as_rows(self.width)
        self.accumulator = None  # n-softsync's, when it is on: c = max(1, ⌊λ/n⌋) gradients
        if self.softsync is not None:
            self.accumulator = SoftSync(end - first, shard.values.shape, self.dtype,
                                        max(1, len(self.workers) // self.softsync))
            self.shard_index = lambda keys: self.layout.value_index(keys + first, first, self.width)
        listening = {w: self._listen(w) for w in self.clocks}
        while listening:
            worker = self._next(listening)
            if worker is None:
                self._unpark()  # a worker was dropped: the clocks may allow more now
                continue
            header = listening[worker].header
            self.requests[header.kind.name] += 1
            try:
                self._handle(worker, header)
                del listening[worker]
            except CommError as err:  # it died between its header and its payload
                self._drop(worker, listening, err)
            self._unpark()  # answers first: a worker waiting for one is not kept waiting
            if worker in self.clocks:  # neither stopped nor dropped: its next request
                listening[worker] = self._listen(worker)
        self._apply_held()
        self._after_leaving(final=True)
        return ServerReport(self.server, self.key_range, self.framed.values,
                            self.shard.version, self.log, self.requests, self.dropped)

    # --- 1-2. listen, and choose whom to answer ------------------------------------------
    def _listen(self, worker: int) -> Listening:
        buf = self.inbox[worker]
        # communication: this worker's next request, whenever it comes: its header, and
        # its payload if short
        return Listening(self.c.irecv_upto(buf, self.workers[worker], Tag.PS_REQUEST), buf)

    def _next(self, listening: dict[int, Listening]) -> int | None:
        """The worker whose request comes next, its header received; None if one was
        dropped instead (the caller looks again)."""
        speaking = [w for w in listening if w not in self.parked and w not in self.at_checkpoint]
        if not speaking:
            raise CommError(f"parameter server {self.server}: every running worker waits for "
                            f"it (reads parked: {sorted(self.parked)}, at a checkpoint: "
                            f"{sorted(self.at_checkpoint)}) and no rule lets any go on")
        if self.deterministic:  # the request begun first, in modelled time
            begun = {}
            for w in speaking:
                try:
                    begun[w] = Header.read(self.c.peek(listening[w].request)).timestamp
                except CommError as err:
                    self._drop(w, listening, err)
                    return None
            worker = min(speaking, key=lambda w: (begun[w], w))
        else:  # the request that arrives first
            try:
                worker = speaking[self.c.wait_any([listening[w].request for w in speaking])]
            except PeerFailed as err:  # MPI names the failed ranks, not the request
                for w in [w for w in speaking if self.workers[w] in err.ranks]:
                    self._drop(w, listening, err)
                return None
        try:
            listening[worker].request.wait()
        except CommError as err:
            self._drop(worker, listening, err)
            return None
        listening[worker].header = Header.read(listening[worker].buf)
        return worker

    def _drop(self, worker: int, listening: dict[int, Listening], err: CommError) -> None:
        del listening[worker]
        self.clocks.pop(worker, None)
        self._after_leaving()
        self.dropped.append(worker)
        print(f"parameter server {self.server}: worker {worker} (rank {self.workers[worker]}) "
              f"is gone, dropped from the clocks: {err}", file=sys.stderr)

    # --- 3. handle one request -----------------------------------------------------------
    def _handle(self, worker: int, header: Header) -> None:
        kind = header.kind
        if kind in (Kind.PUSH, Kind.PULL, Kind.PUSH_PULL):
            riding = self.inbox[worker][HEADER_BYTES:]
            keys, rows = receive_payload(self.c, riding, header, self.workers[worker], self.dtype)
            rows = rows.reshape(-1, self.width)
            if kind is not Kind.PULL:
                self._take_push(worker, header, keys, rows, acknowledge=kind is Kind.PUSH)
            clock = header.clock
            if kind is Kind.PUSH_PULL:  # the iteration is over: a read for the next one
                clock = self.clocks[worker] = clock + 1
            if kind is not Kind.PUSH:
                self.parked[worker] = (clock, keys.copy())
        elif kind is Kind.CLOCK:
            self.clocks[worker] = header.clock
        elif kind is Kind.CHECKPOINT:
            self.at_checkpoint[worker] = header
        else:
            del self.clocks[worker]
            self._after_leaving()

    def _take_push(self, worker: int, header: Header, keys: np.ndarray, rows: np.ndarray,
                   acknowledge: bool) -> None:
        """A push's rows: held until the barrier (BSP), else applied now; acknowledged (a
        PUSH_PULL is answered by its read). No keys: nothing for this shard."""
        if self.rule.holds_updates and keys.size:
            self.held.hold(worker, header, keys, rows)
        elif keys.size:
            self._push(worker, header, keys, rows)
        if acknowledge:
            self._reply(worker, self.shard.version)

    def _push(self, worker: int, header: Header, keys: np.ndarray, rows: np.ndarray) -> None:
        first = self.key_range[0]
        tau = self.shard.version - header.version + 1  # 1 + the updates it missed
        self.log.gradients[tau] += 1
        index = self.index_of[worker](keys)
        scale = self.optimizer.scale(tau)
        if self.accumulator is None:
            self.shard.apply(index, rows if scale == 1.0 else scale * rows)
        elif self.accumulator.add(keys - first, index, rows, scale):
            self.accumulator.apply_to(self.shard, self.shard_index)

    def _after_leaving(self, final: bool = False) -> None:
        """n-softsync once a worker stopped or went: c = ⌊λ/n⌋ of those running (BSP: of
        each iteration's pushes, ``_apply_held``); at the end, what is left is an update."""
        if self.accumulator is None:
            return
        ready = not self.rule.holds_updates and self.accumulator.resize(
            len(self.clocks) // self.softsync)
        if self.accumulator.count and (ready or final):
            self.accumulator.apply_to(self.shard, self.shard_index)

    def _reply(self, worker: int, value: int) -> None:
        # communication: one integer: the shard's version (acknowledging a push), or the
        # clock a checkpoint saved (the worker may go on)
        self.c.send(np.array([value], np.int64).view(np.uint8), self.workers[worker], Tag.PS_REPLY)

    # --- 4. answer the reads the clocks allow ------------------------------------------
    def _apply_held(self) -> None:
        """BSP: apply the pushes of every iteration all running workers have finished (all
        of them once no worker runs), in an order that does not depend on their timing."""
        ready = self.held.release(self.clocks.values())
        if self.accumulator is not None and ready:
            # n-softsync: ⌊the iteration's pushes / n⌋ to an update (fewer once workers left)
            self.accumulator.resize(len(ready) // self.softsync)
        for push in ready:
            self._push(*push)

    def _unpark(self) -> None:
        self._apply_held()
        if not self.parked and not self.at_checkpoint:
            return
        clocks = list(self.clocks.values())
        for worker, (clock, keys) in sorted(self.parked.items()):
            if self.rule.may_serve(clock, clocks):
                del self.parked[worker]
                self.log.reads[max(0, clock - min(clocks, default=clock))] += 1
                self._answer_read(worker, keys)
        waiting = list(self.at_checkpoint.values())
        if waiting and len(waiting) == len(self.clocks) and len({h.clock for h in waiting}) == 1:
            self._checkpoint(waiting[0].clock)

    def _answer_read(self, worker: int, keys: np.ndarray) -> None:
        index = self.index_of[worker](keys)
        answer = self.framed.answer(self.shard.version, index)
        if answer is None:  # rows from elsewhere: gathered behind the version
            nbytes = 8 + self.layout.value_count(keys) * self.dtype.itemsize
            answer = self.framed.gathered(self.shard.version, index,
                                          self.c.scratch(nbytes, np.uint8, "ps answer"))
        # communication: the version, then the rows read
        self.c.send(answer, self.workers[worker], Tag.PS_REPLY)

    def _checkpoint(self, clock: int) -> None:
        refuse_to_save(self.checkpoint_path, clock, self.accumulator)
        save_shard(self.checkpoint_path, self.server, self.shard, clock, self.key_range,
                   servers=self.c.size - len(self.workers))  # every other rank serves
        for worker in sorted(self.at_checkpoint):
            self._reply(worker, clock)
        self.at_checkpoint.clear()
