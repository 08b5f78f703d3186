"""Message tags: one registry, so that two protocols never share a tag.

A receive matches a message by (source, tag). Two protocols that could have
messages in flight between the same pair of ranks at once must use
different tags, or one may take the other's message. Every tag the library
sends with is named here; user code and the labs use tag 0, the default, and
so do the collectives (``collectives/basic.py`` and the allreduce
algorithms), written as the lessons are, but on a duplicate communicator of
their own (``c.private()``), whose messages never match the user's. A
pipeline (``parallel/pipeline``) sends on a duplicate of its own too, where
the tag names the micro-batch: 0 the header, 2m+1 micro-batch m's
activation, 2m+2 its gradient.
"""

from __future__ import annotations

from enum import IntEnum


class Tag(IntEnum):
    """Every tag the library uses, by protocol."""

    USER = 0  # the default: user code, the labs, and the collectives on their c.private()
    AGREEMENT = 31  # the agreement check's packets (collectives/agreement.py)
    GLOVE_GATHER = 81  # a sharded GloVe table gathered on rank 0
    PS_REQUEST = 91  # a parameter-server request's header, worker -> server (parallel/ps)
    PS_PAYLOAD = 92  # its keys and values, worker -> server
    PS_REPLY = 93  # a server's answer: a push's acknowledgement, a pull's rows
    PS_COLLECT = 94  # servers' final shards gathered on rank 0
