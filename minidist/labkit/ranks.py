"""Running an answer on P in-process ranks and reading what it sent: shared by Labs 2-5.

A multi-rank check runs the function under test on in-process ranks
(:class:`~minidist.comm.LocalCluster`, ranks as cooperative tasks), each rank with its
own input (:func:`rank_inputs`), through :func:`run_ranks`, then compares
two things with what the algorithm must give:

1. the values: against numpy on the gathered inputs (a single-process
   reference, computed by the check, never by the code under test);
2. the traffic: the transport's per-rank counters (messages, bytes,
   ``rounds`` = message latencies on the critical path) against the
   algorithm's formula (:func:`expect_counts`, :func:`expect_rounds`), and
   where the text prescribes a schedule, whom each rank sent to and received
   from (:class:`MessageLog`).

While the function runs, every function of the library's collectives is
**blocked** (:data:`LIBRARY_COLLECTIVES`): an answer must be written with
``send`` and ``recv``. A rank that raises, or ranks that deadlock, fail the
check with one sentence naming the rank (the transport detects deadlocks
instead of hanging).
"""

from __future__ import annotations

import contextvars
import importlib
import pkgutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FunctionType
from typing import Any

import numpy as np

from minidist.comm import LocalCluster, LocalStats, NetworkModel
from minidist.comm.errors import CommError, RankError
from minidist.labkit.blocking import blocked
from minidist.labkit.checks import CheckFailed, expect

RUN_TIMEOUT = 30.0  # seconds of wall clock for one multi-rank run


def library_collectives() -> tuple[str, ...]:
    """The dotted path of every function the modules of ``minidist.comm.collectives`` define.

    Generated from the package, not kept by hand: an algorithm the library
    adds or renames is blocked from then on. Closures and wrapped functions
    (``lru_cache``) cannot be blocked (``blocking.py``) and move no data.
    """
    from minidist.comm import collectives

    names = []
    for info in pkgutil.iter_modules(collectives.__path__):
        module = importlib.import_module(f"{collectives.__name__}.{info.name}")
        names += [f"{module.__name__}.{name}" for name, obj in vars(module).items()
                  if isinstance(obj, FunctionType) and obj.__module__ == module.__name__
                  and not obj.__code__.co_freevars]
    return tuple(names)


LIBRARY_COLLECTIVES = library_collectives()


def rank_inputs(world_size: int, n: int, dtype: str = "float64", seed: int = 0) -> np.ndarray:
    """One input per rank, shape ``(P, n)``: random floats, or integers in [-50, 50)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((world_size, n)).astype(dtype)
    return rng.integers(-50, 50, (world_size, n)).astype(dtype)


def as_one_sentence(error: RankError, what: str) -> BaseException:
    """What a failed run should tell the student: the rank's own error, in one sentence.

    ``NotImplementedError`` (not done yet, or a blocked library function) and
    failed checks pass through unchanged, so ``task`` words them as usual; so does
    what is not an error of the code (an interrupt, the grader's cell timeout).
    """
    cause = error.__cause__
    if isinstance(cause, NotImplementedError | CheckFailed) or not isinstance(cause, Exception):
        return cause
    if isinstance(cause, CommError):
        return CheckFailed(f"{what}: {cause}")
    return CheckFailed(f"{what}: rank {error.rank} raised {error.summary}")


def run_ranks(body: Callable[[Any], Any], world_size: int, what: str,
              block: tuple[str, ...] = LIBRARY_COLLECTIVES, modelled_perf_counter: bool = False,
              **options: Any) -> tuple[list[Any], list[LocalStats]]:
    """Run ``body(c)`` on ``world_size`` in-process ranks with ``block`` blocked (the
    library's collectives); returns the results and each rank's counters.

    ``modelled_perf_counter=True``: on each rank, ``time.perf_counter()`` reads that
    rank's modelled clock while it runs, so that an answer that times itself can be
    checked exactly. ``options``: LocalCluster's. The test suite passes ``block=()`` to check the
    library.
    """
    __tracebackhide__ = True
    options.setdefault("network", NetworkModel())
    cluster = LocalCluster(world_size, **options)
    if modelled_perf_counter:
        body = clocked(body)
    try:
        with blocked(*block), perf_counter_reads_the_modelled_clock(modelled_perf_counter):
            results = cluster.run(body, timeout=RUN_TIMEOUT)
    except RankError as error:
        raise as_one_sentence(error, what) from None
    except TimeoutError:
        raise CheckFailed(f"{what}: did not finish within {RUN_TIMEOUT:g} s") from None
    return results, cluster.stats


_clock_of_this_rank: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "minidist_modelled_clock", default=None)


def clocked(body: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``body``, its rank's modelled clock made the clock of that rank while it runs."""
    def timed(c: Any) -> Any:
        token = _clock_of_this_rank.set(c.stats)
        try:
            return body(c)
        finally:
            _clock_of_this_rank.reset(token)

    return timed


def reads_the_modelled_clock() -> bool:
    """Whether ``time.perf_counter()`` reads the modelled clock in the rank running now (a
    rank lent to the student's kernel then reads it there too, ``relay.py``)."""
    return _clock_of_this_rank.get() is not None


@contextmanager
def perf_counter_reads_the_modelled_clock(active: bool = True) -> Iterator[None]:
    """While it lasts (if ``active``), ``time.perf_counter()`` in a rank that runs a
    ``clocked`` body returns that rank's modelled clock; elsewhere, the real one."""
    real = time.perf_counter

    def modelled() -> float:
        stats = _clock_of_this_rank.get()
        return real() if stats is None else stats.clock

    if active:
        time.perf_counter = modelled
    try:
        yield
    finally:
        time.perf_counter = real


def expect_new_arrays(what: str, results: list[Any], inputs: list[np.ndarray],
                      data: np.ndarray) -> None:
    """Every result but None is a new array of the input's dtype; every input is unchanged."""
    __tracebackhide__ = True
    for rank, (got, arr) in enumerate(zip(results, inputs, strict=True)):
        if got is None:
            continue
        kind = f"{got.dtype} values" if isinstance(got, np.ndarray) else type(got).__name__
        expect(isinstance(got, np.ndarray) and got.dtype == data.dtype, f"{what}: rank {rank} "
               f"returned {kind}; the result keeps the input's dtype, {data.dtype}")
        expect(not np.shares_memory(got, arr), f"{what}: rank {rank} returned its own arr "
               "(or a view of it); the text asks for a new array")
    for rank, arr in enumerate(inputs):
        expect(np.array_equal(arr, data[rank]), f"{what}: rank {rank}'s arr was changed in "
               "place; the text asks to leave arr as it is (work on a copy)")


def expect_counts(what: str, stats: list[LocalStats], counter: str, expected: list[int],
                  claim: str = "") -> None:
    """Each rank's ``counter`` (e.g. ``messages_sent``) must equal ``expected[rank]``;
    ``claim`` names the text's rule in the failure sentence."""
    __tracebackhide__ = True
    got = [getattr(s, counter) for s in stats]
    because = f" ({claim})" if claim else ""
    for rank, (g, e) in enumerate(zip(got, expected, strict=True)):
        expect(g == e, f"{what}: rank {rank} has {counter} = {g}, expected {e}{because} "
               f"(all ranks: {got})")


def expect_rounds(what: str, stats: list[LocalStats], expected: int, name: str) -> None:
    """The run's rounds (the largest over the ranks) must be ``expected``."""
    __tracebackhide__ = True
    rounds = max(s.rounds for s in stats)
    expect(rounds == expected, f"{what}: took {rounds} rounds of message latency, "
           f"a {name} takes {expected}")


class MessageLog:
    """Rank ``c`` as the answer sees it, writing down whom it sends to and receives from.

    The counters say how much moved; this says between whom, in the order the
    rank posted its calls: ``calls`` gets ``("send", dest)`` and ``("recv",
    source)`` (a ``sendrecv`` is both, the send first); ``reduced[0]`` counts the
    bytes reduced through ``combine`` (which the clock charges γ per byte).
    Everything else is ``c``'s own.
    """

    def __init__(self, c: Any, calls: list[tuple[str, int]],
                 reduced: list[int] | None = None) -> None:
        self._c, self.calls = c, calls
        self.reduced = [0] if reduced is None else reduced
        self.rank, self.size = c.rank, c.size

    def combine(self, op: str, acc: np.ndarray, incoming: np.ndarray,
                incoming_first: bool = False) -> None:
        self.reduced[0] += acc.nbytes
        self._c.combine(op, acc, incoming, incoming_first)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def note(self, kind: str, peer: int) -> None:
        """One call posted: ``kind`` is ``"send"`` or ``"recv"``."""
        self.calls.append((kind, peer))

    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        self.note("send", dest)
        self._c.send(buf, dest, tag)

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Any:
        self.note("send", dest)
        return self._c.isend(buf, dest, tag)

    def recv(self, buf: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        self.note("recv", source)
        return self._c.recv(buf, source, tag)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Any:
        self.note("recv", source)
        return self._c.irecv(buf, source, tag)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray, source: int,
                 sendtag: int = 0, recvtag: int = 0) -> np.ndarray:
        self.note("send", dest)
        self.note("recv", source)
        return self._c.sendrecv(sendbuf, dest, recvbuf, source, sendtag, recvtag)


class ClockLog(MessageLog):
    """Rank ``c`` as a timed answer gets it, noting when each ``barrier`` and each
    ``compute`` (declared work) began and ended on the modelled clock, so that a trace
    the answer returns can be held to what the grader's rank did. Its duplicates note
    into the same lists (a ``Pipeline`` talks on one)."""

    def __init__(self, c: Any, barriers: list[tuple[float, float]] | None = None,
                 computes: list[tuple[float, float]] | None = None) -> None:
        super().__init__(c, [])
        self.barriers = [] if barriers is None else barriers
        self.computes = [] if computes is None else computes

    def barrier(self) -> None:
        start = self._c.stats.clock
        self._c.barrier()
        self.barriers.append((start, self._c.stats.clock))

    def compute(self, seconds: float) -> None:
        start = self._c.stats.clock
        self._c.compute(seconds)
        self.computes.append((start, self._c.stats.clock))

    def dup(self) -> ClockLog:
        return ClockLog(self._c.dup(), self.barriers, self.computes)
