"""What a blocked in-process rank waits for, and the words that say so.

``Fabric.block_until`` keeps a :class:`Wait` for each blocked rank (a request
is its own), and a rank that tests a request in a loop leaves the request it
tested. When a wait can never complete, its error names it, what each rank
that could complete it is doing, and what every blocked rank waits for (a
loop of tests is not decided: the run's timeout ends it, and says what each
rank tests).

A rank is named as its program knows it: by its rank in the communicator of
the call, the world rank beside it where the two numberings differ (a
``split`` communicator's rank 1 may be world rank 3, whose ``recv from rank
0`` is from the split's rank 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

SHOWN_WAITS = 8  # a deadlock's error names this many ranks' waits, then counts the rest


@dataclass
class Wait:
    """Why a rank is blocked: a description and the world ranks that could release it."""

    rank: int  # the waiting rank, numbered in the communicator it called
    what: str  # e.g. "recv from rank 1 tag 7"
    done: Callable[[], bool]
    peers: Callable[[], list[tuple[int, int]]]  # (rank in the communicator, world rank)


def label(rank: int, world: int, same_numbering: bool = True) -> str:
    """``rank r`` of a communicator; ``rank r (world rank w)`` where its numbering is not
    the world's (``same_numbering``: its other ranks' too)."""
    if rank == world and same_numbering:
        return f"rank {rank}"
    return f"rank {rank} (world rank {world})"


def named(world: int, wait: Wait) -> str:
    """The waiting rank, labelled in its wait's communicator (its peers' numbering too)."""
    return label(wait.rank, world, all(rank == w for rank, w in wait.peers()))


def explain(wait: Wait, ended: Mapping[int, str], waiting: Mapping[int, Wait],
            testing: Mapping[int, Wait]) -> str:
    """What the ranks that could release ``wait`` are doing, in words (they are named as
    ``wait``'s communicator numbers them; what they wait for, as theirs does)."""
    states = []
    for rank, world in wait.peers():
        if world in ended:
            states.append(f"rank {rank} {ended[world]}")
        elif world in waiting or world in testing:
            theirs = waiting.get(world) or testing[world]
            doing = "is blocked in" if world in waiting else "keeps testing"
            again = "" if named(world, theirs) == f"rank {rank}" else \
                f" (as rank {theirs.rank} of that call's communicator, world rank {world})"
            states.append(f"rank {rank} {doing} {theirs.what}{again}")
        else:
            states.append(f"rank {rank} is still running")
    return "; ".join(states) or "no peer"


def every_wait(waiting: Mapping[int, Wait]) -> str:
    """What every rank of a deadlock waits for, by world rank (the first few of many)."""
    ranks = sorted(waiting)
    shown = [f"{named(w, waiting[w])} in {waiting[w].what}" for w in ranks[:SHOWN_WAITS]]
    more = f"; and {len(ranks) - SHOWN_WAITS} more" if len(ranks) > SHOWN_WAITS else ""
    return f"blocked: {'; '.join(shown)}{more}"
