"""Running a function on P in-process ranks: a cluster on one laptop, in one process.

``run_local(fn, P)`` starts P ranks (cooperative tasks, ``scheduler.py``), gives each a
:class:`~minidist.comm.transport.local.LocalCommunicator` of one shared
fabric, runs ``fn(comm, *args)`` on every rank and returns the P results
in rank order. A :class:`LocalCluster` does the same and keeps each rank's
counters afterwards (``cluster.stats[rank]``), so a notebook can read what
an algorithm cost::

    cluster = LocalCluster(4, network=NetworkModel(alpha=1e-6, beta=1e-9, gamma=0))
    cluster.run(lambda c: comm.allreduce(np.ones(1000), c, algorithm="ring"))
    cluster.stats[0].bytes_sent, cluster.stats[0].rounds, cluster.stats[0].clock

If a rank raises, the others get errors instead of hanging (their
receives from it can never match), and the caller gets a
:class:`~minidist.comm.errors.RankError` naming the rank whose exception
came first (the cause, not the peers' consequences), with its traceback.

The ranks take turns on one thread, so P ranks do not compute P times
faster: the *modelled* clock, not the wall clock, is this transport's
measure of speed. They run on a thread of their own, so that the caller
can give up: a rank that computes forever cannot be stopped, but after
``timeout`` seconds the run raises ``TimeoutError`` and leaves that thread
behind (a daemon; the ranks' next communication raises).
"""

from __future__ import annotations

import functools
import itertools
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from minidist.comm.cost.network import NetworkModel
from minidist.comm.errors import CommError, RankError, RankFailure
from minidist.comm.transport.communicator import is_rank
from minidist.comm.transport.fabric import Fabric
from minidist.comm.transport.local import LocalCommunicator, RankState, Straggler
from minidist.comm.transport.scheduler import run_ranks
from minidist.comm.transport.stats import LocalStats
from minidist.comm.transport.trace import trace_enabled
from minidist.util.values import whole


class LocalCluster:
    """P in-process ranks with a network model, stragglers and failures.

    - ``network``: a :class:`NetworkModel`; default ``NetworkModel()``, the same
      figures on every machine, so a notebook's clocks read the same everywhere
      (pass ``comm.load_network_model()`` for this machine's fit).
    - ``stragglers``: ``{rank: Straggler(...)}``, or ``{rank: seconds}`` as a
      shorthand for ``Straggler(delay=seconds)``.
    - ``failures``: ``{rank: k}``: the rank's first ``k`` communication
      calls work (send, recv, isend, irecv, barrier, split; a sendrecv is an
      irecv and an isend), the next raises ``RankFailure``.
    - ``eager_limit``: sends above this many bytes wait for their receive.
    - ``trace``: print every message (default: ``MINIDIST_TRACE``).
    """

    def __init__(self, world_size: int, network: NetworkModel | None = None,
                 stragglers: Mapping[int, Straggler | float] | None = None,
                 failures: Mapping[int, int] | None = None,
                 eager_limit: int | None = None, trace: bool | None = None) -> None:
        world_size = whole("world_size", world_size, least=1)
        for rank in [*(stragglers or {}), *(failures or {})]:
            if not is_rank(rank, world_size):
                raise ValueError(f"straggler/failure for rank {rank!r}, but ranks are "
                                 f"0..{world_size - 1}")
        self.world_size = world_size
        self.network = network if network is not None else NetworkModel()
        self.stragglers = {r: s if isinstance(s, Straggler) else Straggler(delay=float(s))
                           for r, s in (stragglers or {}).items()}
        self.failures = {r: whole(f"failures[{r}] (calls that work before it fails)", after)
                         for r, after in (failures or {}).items()}
        self.eager_limit = None if eager_limit is None else whole("eager_limit", eager_limit)
        self.trace = trace_enabled() if trace is None else trace
        self.stats: list[LocalStats] = [LocalStats() for _ in range(world_size)]

    def communicators(self) -> list[LocalCommunicator]:
        """Fresh world communicators, one per rank, on a new fabric (resets ``stats``)."""
        fabric = Fabric(self.world_size)
        states = [RankState(rank, self.network, self.stragglers.get(rank, Straggler()),
                            self.failures.get(rank), self.eager_limit, self.trace)
                  for rank in range(self.world_size)]
        self.stats = [state.stats for state in states]
        world = list(range(self.world_size))
        return [LocalCommunicator(fabric, state, world) for state in states]

    def run(self, fn: Callable[..., Any], args: tuple = (), timeout: float | None = 60.0
            ) -> list[Any]:
        """``[fn(comm, *args) for every rank]``, the ranks taking turns on one thread."""
        comms = self.communicators()
        fabric = comms[0].fabric
        results: list[Any] = [None] * self.world_size
        errors: dict[int, tuple[int, BaseException, str]] = {}
        order = itertools.count()

        def body(comm: LocalCommunicator) -> None:
            try:
                results[comm.rank] = fn(comm, *args)
                fabric.end(comm.rank, "finished")
            except BaseException as err:  # reported to the caller below, with its rank
                errors[comm.rank] = (next(order), err, traceback.format_exc())
                fabric.end(comm.rank, f"failed with {type(err).__name__}")

        crashed: list[str] = []  # the transport's own failure, outside every rank's body

        def hub() -> None:
            try:
                run_ranks(fabric, [functools.partial(body, c) for c in comms])
            except BaseException:  # raised to the caller below: never a silent None
                crashed.append(traceback.format_exc())

        runner = threading.Thread(target=hub, name="minidist-ranks", daemon=True)
        runner.start()
        _join(runner, timeout, fabric, fn)
        if crashed:
            raise RuntimeError(f"the in-process transport failed while running "
                               f"{getattr(fn, '__name__', fn)!s}:\n{crashed[0]}")
        if errors:
            rank, (_, err, text) = min(errors.items(), key=_cause_first)
            raise RankError(rank, f"{type(err).__name__}: {err}", text) from err
        return results


def run_local(fn: Callable[..., Any], world_size: int, args: tuple = (),
              timeout: float | None = 60.0, **options: Any) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``world_size`` in-process ranks; options as LocalCluster."""
    return LocalCluster(world_size, **options).run(fn, args, timeout)


def _cause_first(item: tuple[int, tuple[int, BaseException, str]]) -> tuple[bool, int]:
    """Sort key: an error of the program itself (or an injected failure) before the
    communication errors it caused on its peers; then by time."""
    _, (when, err, _) = item
    consequence = isinstance(err, CommError) and not isinstance(err, RankFailure)
    return consequence, when


def _join(runner: threading.Thread, timeout: float | None, fabric: Fabric,
          fn: Callable[..., Any]) -> None:
    """Wait for the ranks' thread; after ``timeout`` s abort the fabric and raise."""
    try:
        runner.join(timeout)
    except BaseException:  # e.g. Ctrl-C in a notebook: blocked ranks raise and end
        fabric.abort("the caller was interrupted")
        raise
    if runner.is_alive():
        running = [fabric.doing(r) for r in range(fabric.size) if r not in fabric.ended]
        fabric.abort(f"the run timed out after {timeout} s")
        name = getattr(fn, "__name__", repr(fn))
        raise TimeoutError(f"local run of {name} did not finish within {timeout} s "
                           f"(still running: {'; '.join(running)})")
