"""Running P in-process ranks as cooperative tasks: one at a time, switching when one waits.

Each rank is a greenlet (a function with its own stack that can pause and
be resumed; ``pip install greenlet``). A *hub* hands out turns:

1. every rank gets a turn, in rank order, and runs until it must wait
   (``Fabric.block_until``) or ends;
2. whatever could complete a wait puts the waiting rank on the queue of
   turns (``Fabric.wake``); a rank that must wait hands its turn to the
   first queued rank (first in, first out), and a resumed rank that still
   cannot go on hands it on again;
3. when the queue is empty and ranks still wait, nobody can run: the fabric
   decides every wait (``Fabric.settle``: go on, never matched, or deadlock)
   and the hub resumes the ranks it names; when every rank has ended, the
   run is over.

So a run is deterministic (the same turns in the same order every time),
costs one switch per wait instead of an operating-system thread per rank,
and a deadlock is found exactly when it happens. Ranks share one thread:
a rank that computes never lets the others run meanwhile, which changes
nothing the transport measures (its clocks are modelled).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator

from greenlet import greenlet

from minidist.comm.transport.fabric import Fabric

# Python's cycle collector runs after every 700 new objects by default, and each
# collection walks every object still alive in the generations it collects. A
# collective on a thousand ranks keeps up to P^2 messages waiting in mailboxes
# (young objects, none in a cycle; a message makes about ten objects), so a run
# collects after a million new objects, when most of those made since the last
# collection are gone; cycles are still freed, at most a million objects late.
YOUNG_OBJECTS_PER_COLLECTION = 1_000_000
_runs = {"count": 0, "thresholds": gc.get_threshold()}  # runs under way, what they replaced
_runs_lock = threading.Lock()


def run_ranks(fabric: Fabric, bodies: list[Callable[[], None]]) -> None:
    """Run ``bodies[r]()`` as world rank ``r`` of ``fabric`` until every one has returned.

    The bodies must not raise (record errors and return): an exception here
    would end the hub with ranks unfinished.
    """
    hub = greenlet.getcurrent()
    tasks = [greenlet(body, parent=hub) for body in bodies]  # an ended rank returns to the hub

    def next_turn() -> None:
        """From a rank that must wait: hand the turn straight to the next queued rank
        (one switch, not two through the hub), or to the hub when none is queued or
        the next has not started (it starts from the hub, on a stack of its own)."""
        if fabric.turns and tasks[fabric.turns[0]]:  # queued, and started (not ended)
            rank = fabric.take_turn()
            if tasks[rank] is not greenlet.getcurrent():  # (a rank that passed its turn
                tasks[rank].switch()                      # may find itself next)
        else:
            hub.switch()

    fabric.yield_turn = next_turn
    for rank in range(len(tasks)):
        fabric.queue_turn(rank)
    with _collecting_less_often():
        _hand_out_turns(fabric, tasks)


@contextlib.contextmanager
def _collecting_less_often() -> Iterator[None]:
    """The collector's threshold raised while any run is under way (runs may overlap:
    one nested in a rank, or one left running by a timed-out caller), restored by the
    last to end."""
    with _runs_lock:
        if _runs["count"] == 0:
            _runs["thresholds"] = gc.get_threshold()
            gc.set_threshold(YOUNG_OBJECTS_PER_COLLECTION, *_runs["thresholds"][1:])
        _runs["count"] += 1
    try:
        yield
    finally:
        with _runs_lock:
            _runs["count"] -= 1
            if _runs["count"] == 0:
                gc.set_threshold(*_runs["thresholds"])


def _hand_out_turns(fabric: Fabric, tasks: list[greenlet]) -> None:
    """The hub's loop: resume the queued ranks in turn, settling when none is queued."""
    while True:
        if not fabric.turns:
            if not fabric.waiting:
                break  # every rank has ended
            for rank in fabric.settle():
                fabric.queue_turn(rank)
        rank = fabric.take_turn()
        if not tasks[rank].dead:
            tasks[rank].switch()
