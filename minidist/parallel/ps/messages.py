"""What workers and servers say to each other: six requests, two answers.

A worker speaks to a server in **requests**; each starts with a fixed-size
header (``HEADER_BYTES``, tag ``Tag.PS_REQUEST``) so that the server, which
listens to every worker at once, can post its receives before it knows
what comes. The header says the kind of request and how long its payload
(tag ``Tag.PS_PAYLOAD``) is:

=========  =====================================  ===================================
request     payload                                answer (tag ``Tag.PS_REPLY``)
=========  =====================================  ===================================
PUSH        keys (int64) then their gradient rows   the shard's version (8 bytes)
PULL        keys (int64)                            version (8 bytes) then the rows
PUSH_PULL   a PUSH, a CLOCK, then a PULL            version (8 bytes) then the rows,
            of its keys: keys, then rows            once the read is allowed
CLOCK       none: "I finished an iteration"         none
CHECKPOINT  none: "save the shards at this clock"   the clock saved (8 bytes)
STOP        none: "I am done"                       none
=========  =====================================  ===================================

Every payload and answer is a byte buffer: int64 keys and the values'
dtype side by side without conversion. A server answers one worker's
requests in the order they were sent (MPI keeps a sender's messages to one
receiver in order), so a worker posts its answers' receives in that order.

The header also carries the worker's **clock** (iterations finished), the
**version** of the shard its gradient was computed from (staleness), and a
**timestamp**: on the in-process transport, the worker's modelled time when
it began the request (the same in the copies to every server), by which
servers take requests in the order a network would deliver them, the same
on every run (``server.py``, deterministic order).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from minidist.comm.transport.communicator import Request

HEADER_FIELDS = 6
HEADER_BYTES = 8 * HEADER_FIELDS


class Kind(IntEnum):
    """The requests a worker sends."""

    PUSH = 1
    PULL = 2
    CLOCK = 3
    CHECKPOINT = 4
    STOP = 5
    PUSH_PULL = 6


class Header(NamedTuple):
    """A request's header: six int64 on the wire (the timestamp as its float64 bits); a
    named tuple, made and read at every request (a quarter of a frozen dataclass's cost)."""

    kind: Kind
    clock: int = 0
    keys: int = 0  # how many keys the payload carries
    values: int = 0  # how many values follow them (a push's gradient rows)
    version: int = -1  # the shard version a pushed gradient was computed from
    timestamp: float = 0.0

    def to_array(self) -> np.ndarray:
        wire = np.array([self.kind, self.clock, self.keys, self.values, self.version, 0],
                        np.int64)
        wire[5:].view(np.float64)[0] = self.timestamp
        return wire

    @classmethod
    def from_array(cls, wire: np.ndarray) -> Header:
        kind, clock, keys, values, version, _ = wire.tolist()
        return cls(Kind(kind), clock, keys, values, version, float(wire[5:].view(np.float64)[0]))

    def payload_bytes(self, itemsize: int) -> int:
        return 8 * self.keys + itemsize * self.values


def unpack(payload: np.ndarray, nkeys: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """A payload's (keys, values), as views of the buffer: its first ``8·nkeys`` bytes
    are the keys (int64), the rest the values (a push's rows; a worker packs them with
    ``plans.Route.pack_push``)."""
    return payload[:8 * nkeys].view(np.int64), payload[8 * nkeys:].view(dtype)


def version_and_rows(reply: np.ndarray, dtype: np.dtype) -> tuple[int, np.ndarray]:
    """A pull's answer: (the shard's version, its rows)."""
    return int(reply[:8].view(np.int64)[0]), reply[8:].view(dtype)


@dataclass
class Listening:
    """The header receive a server posts for one worker (``server.py``)."""

    request: Request
    buf: np.ndarray
    header: Header | None = None  # set once received
