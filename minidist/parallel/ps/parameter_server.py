"""``ParameterServer``: S server ranks and W worker ranks on one communicator.

Every rank builds the same ``ParameterServer``; ranks 0..S-1 are servers,
ranks S..P-1 workers (worker w is rank S + w). A training script reads::

    ps = ParameterServer(c, layout, servers=1, optimizer=ServerOptimizer("sgd", lr=0.1),
                         consistency="ssp", staleness=3)
    if ps.is_server:
        report = ps.serve(initial)       # until every worker stops; its shard, its logs
    else:
        worker = ps.worker()
        for t in range(worker.clock, steps):
            w = worker.pull(keys)
            worker.push(keys, gradient(w, batch(t)))
            worker.tick()
        worker.stop()

(``worker.push_pull(keys, g)`` does a push, a tick and the next clock's pull in
one round trip: ``train_mlp``'s loop. Its read is taken when the push arrives,
a round trip earlier than a pull of its own, so under SSP and ASP it may miss
updates a separate pull would see; the consistency rule bounds it alike.)

The same code runs under MPI and on the in-process transport. There, by
default, servers take requests in the order of the workers' modelled
clocks (``server.py``), so a run is the same to the bit every time
("deterministic mode"); stragglers and failures come from the cluster
(``LocalCluster(stragglers=..., failures=...)``). Deterministic mode needs
workers that talk to the servers only: a server waits for every running
worker's next request, and a worker blocked on another worker (say, in an
allreduce of its own) would never send it. Such runs pass
``deterministic=False``: requests are then taken as they arrive.

A checkpoint directory (``checkpoint=``) lets workers call
``worker.checkpoint()`` at a clock they all reach; ``resume=True`` starts
every rank from the last one: the servers' shards and optimiser state, the
workers' clock.
"""

from __future__ import annotations

import os
import zlib

import numpy as np

from minidist.comm.transport.communicator import Communicator
from minidist.parallel.ps.checkpoint import load_shard, saved_clock
from minidist.parallel.ps.consistency import Consistency
from minidist.parallel.ps.consistency import consistency as make_rule
from minidist.parallel.ps.keys import KeyLayout
from minidist.parallel.ps.reports import ServerReport, gather_reports  # noqa: F401
from minidist.parallel.ps.rules import ServerOptimizer, ShardState
from minidist.parallel.ps.server import Server
from minidist.parallel.ps.worker import Worker
from minidist.parallel.replicas import compare_descriptions, digest


class ParameterServer:
    """The roles and the rules of one parameter-server job (see the module docstring).

    - ``optimizer``: what servers apply (default plain SGD, lr 0.1);
    - ``consistency``: "bsp", "asp", "ssp" (with ``staleness``) or a rule object;
    - ``softsync``: n of n-softsync (an update per c = W // n gradients); None: every
      gradient is an update;
    - ``deterministic``: servers take requests in modelled-clock order (the in-process
      transport only; its default there);
    - ``dtype``: of the values on the servers and on the wire;
    - ``key_load``: a weight per key; the key ranges then balance it instead of the
      values (``KeyLayout.split``).

    Every rank must build it with the same settings: building it costs one agreement
    among all ranks (an allgather of a digest of each setting), so that a mistake on
    one rank is the same error on every rank instead of a job whose servers and
    workers wait for each other for ever. No key moves before it.
    """

    def __init__(self, c: Communicator, layout: KeyLayout, servers: int = 1,
                 optimizer: ServerOptimizer | None = None,
                 consistency: str | Consistency = "asp", staleness: int | None = None,
                 softsync: int | None = None, deterministic: bool | None = None,
                 dtype: np.dtype | type = np.float64, checkpoint: str | os.PathLike | None = None,
                 resume: bool = False, key_load: np.ndarray | None = None) -> None:
        problem = _problem(c, servers, softsync, deterministic, resume, checkpoint)
        modelled = hasattr(c.stats, "clock")
        optimizer = optimizer if optimizer is not None else ServerOptimizer()
        deterministic = modelled if deterministic is None else deterministic
        try:  # as the servers will use them, so that two spellings of one choice agree
            rule = make_rule(consistency, staleness)
        except ValueError as err:
            problem, rule = problem or str(err), None
        try:
            dtype = np.dtype(dtype)
        except TypeError as err:
            problem = problem or f"dtype: {err}"
        _same_job_everywhere(c, problem, {
            "servers": servers, "consistency": rule, "softsync": softsync,
            "optimizer": optimizer, "dtype": dtype, "deterministic": deterministic,
            "checkpoint and resume": (str(checkpoint), resume),
            "key layout": layout.tables, "key_load": None if key_load is None
            else zlib.crc32(np.ascontiguousarray(key_load).tobytes())})
        self.c, self.layout, self.servers, self.rule = c, layout, servers, rule
        self.optimizer, self.softsync, self.dtype = optimizer, softsync, dtype
        self.deterministic = deterministic
        self.checkpoint, self.ranges = checkpoint, layout.split(servers, key_load)
        self.start_clock = saved_clock(checkpoint, servers, self.optimizer.rule) \
            if resume else 0
        self.resume = resume
        self.is_server = c.rank < servers
        self.workers = list(range(servers, c.size))

    def serve(self, initial: np.ndarray) -> ServerReport:
        """Serve this rank's key range, starting from its part of ``initial`` (the values
        of every key, ``layout.flatten`` of the model), or from the checkpoint."""
        if not self.is_server:
            raise RuntimeError(f"rank {self.c.rank} is a worker, not a server")
        initial = np.asarray(initial)
        if initial.shape != (self.layout.num_values,):
            raise ValueError(f"initial values: expected {self.layout.num_values} (every key's "
                             f"row, layout.flatten), got shape {initial.shape}")
        server = self.c.rank
        first, end = self.ranges[server]
        part = initial[self.layout.offsets[first]:self.layout.offsets[end]]
        shard = ShardState(np.array(part, self.dtype, copy=True), self.optimizer)
        if self.resume:
            load_shard(self.checkpoint, server, shard, self.ranges[server])
        return Server(self.c, self.layout, server, self.ranges[server], self.workers,
                      self.optimizer, self.rule, self.softsync, self.deterministic,
                      self.dtype, self.checkpoint, self.start_clock).serve(shard)

    def worker(self) -> Worker:
        """This rank's client (worker number ``c.rank - servers``)."""
        if self.is_server:
            raise RuntimeError(f"rank {self.c.rank} is a server, not a worker")
        return Worker(self.c, self.layout, list(range(self.servers)), self.ranges, self.dtype,
                      self.start_clock)


def _problem(c: Communicator, servers: object, softsync: object, deterministic: object,
             resume: bool, checkpoint: object) -> str:
    """What is wrong with this rank's settings ("" if nothing)."""
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        return f"a parameter server needs servers >= 1, got {servers!r}"
    workers = c.size - servers
    if workers < 1:
        return (f"{c.size} ranks and {servers} servers leave no worker: start at least "
                f"{servers + 1} ranks")
    if softsync is not None and not (isinstance(softsync, int) and 1 <= softsync <= workers):
        return f"softsync n must be an integer in 1..{workers} (the workers), got {softsync!r}"
    if deterministic and not hasattr(c.stats, "clock"):
        return ("deterministic order needs the in-process transport's modelled clock; under "
                "MPI requests are taken as they arrive")
    if resume and checkpoint is None:
        return "resume=True needs the checkpoint directory to resume from"
    return ""


def _same_job_everywhere(c: Communicator, problem: str, settings: dict[str, object]) -> None:
    """Raise the same error on every rank unless every rank builds the same job (its
    ``settings``, compared by digest); then a rank's own ``problem``, which the rank at
    fault also names beside the difference it made. A server and a worker that disagree
    on the servers, the keys or the rule would wait for each other's messages for ever."""
    # communication: every rank's settings, as digests, to every rank (one allgather)
    _, name, differ = compare_descriptions(c, {k: digest(v) for k, v in settings.items()})
    if name is not None:
        here = f"; here: {problem}" if problem else ""
        raise ValueError(f"ParameterServer: every rank must build the same parameter server, "
                         f"but rank(s) {differ} differ from rank 0 in {name}{here}")
    if problem:
        raise ValueError(problem)
