"""Message tags: one registry, so that two protocols never share a tag.

A receive matches a message by (source, tag). Two protocols that could have
messages in flight between the same pair of ranks at once must use
different tags, or one may take the other's message. Every tag the library
sends with is named here; user code and the labs use tag 0, the default, and
so do the collectives of ``collectives/basic.py``, written as the lessons
are, but on a duplicate communicator of their own (``c.private()``), whose
messages never match the user's.
"""

from __future__ import annotations

from enum import IntEnum


class Tag(IntEnum):
    """Every tag the library uses, by protocol."""

    USER = 0  # the default: user code, the labs, and basic.py on its own c.private()
    RECURSIVE_DOUBLING = 31  # also the agreement check's packets (collectives/agreement.py)
    RING = 41
    TREE = 51  # tree t of the double tree uses TREE + t
    SECOND_TREE = 52
    CENTRAL = 61  # naive and parameter-server allreduce
    GLOVE_GATHER = 81  # a sharded GloVe table gathered on rank 0
