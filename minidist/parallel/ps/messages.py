"""What workers and servers say to each other: six requests, two answers.

A worker speaks to a server in **requests**; each starts with a fixed-size
header (``HEADER_BYTES``, tag ``Tag.PS_REQUEST``) that says the kind of
request and how long its payload is:

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

**The small-message path.** The server, which listens to every worker at
once, posts one receive per worker before it knows what comes, of
``HEADER_BYTES + INLINE_BYTES`` bytes (``Communicator.irecv_upto``: a
shorter message fills its first bytes). A payload of up to ``INLINE_BYTES``
rides in the same message, right behind the header: the request is then one
message, already in the server's buffer when it wakes. Of a longer payload
the keys still ride with the header if they fit, and the rows follow as a
second message (tag ``Tag.PS_PAYLOAD``), received once the header has said
how long they are: sent straight from the worker's gradient where its rows
lie in one run, without packing them (``Header.inline_bytes``). With more
keys than fit, the whole payload follows. An extra wake-up and a receive
matter little beside moving that many bytes; the bytes sent are the same
every way.

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

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import numpy as np

from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator, Request

WIRE = struct.Struct("<5qd")  # a header's six fields in order, little-endian
HEADER_BYTES = WIRE.size  # 48
INLINE_BYTES = 16 << 10  # a payload up to this long rides in its header's message


class Kind(IntEnum):
    """The requests a worker sends."""

    PUSH = 1
    PULL = 2
    CLOCK = 3
    CHECKPOINT = 4
    STOP = 5
    PUSH_PULL = 6


class Header(NamedTuple):
    """A request's header: five int64 and a float64 on the wire (``WIRE``); a named
    tuple, made and read at every request (a quarter of a frozen dataclass's cost)."""

    kind: Kind
    clock: int = 0
    keys: int = 0  # how many keys the payload carries
    values: int = 0  # how many values follow them (a push's gradient rows)
    version: int = -1  # the shard version a pushed gradient was computed from
    timestamp: float = 0.0

    def write(self, message: np.ndarray) -> None:
        """Into the first ``HEADER_BYTES`` of ``message`` (bytes)."""
        WIRE.pack_into(message, 0, *self)

    @classmethod
    def read(cls, message: np.ndarray) -> Header:
        """From the first ``HEADER_BYTES`` of ``message`` (bytes)."""
        kind, *fields = WIRE.unpack_from(message)
        return cls(Kind(kind), *fields)

    def payload_bytes(self, itemsize: int) -> int:
        return 8 * self.keys + itemsize * self.values

    def inline_bytes(self, itemsize: int) -> int:
        """How many of the payload's first bytes ride in the header's message (the rest
        follows as one message): all, up to ``INLINE_BYTES``; else the keys, if they fit;
        else none."""
        size, keys = self.payload_bytes(itemsize), 8 * self.keys
        if size <= INLINE_BYTES:
            return size
        return keys if keys <= INLINE_BYTES else 0


def unpack(payload: np.ndarray, nkeys: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """A payload's (keys, values), as views of the buffer: its first ``8·nkeys`` bytes
    are the keys (int64), the rest the values (a push's rows; a worker packs them with
    ``plans.Route.pack_push``)."""
    return payload[:8 * nkeys].view(np.int64), payload[8 * nkeys:].view(dtype)


def receive_payload(c: Communicator, riding: np.ndarray, header: Header, source: int,
                    dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """A request's (keys, rows), as views of the buffers they land in: ``riding`` (what
    came behind the header in its message), and for a long payload the communicator's
    kept buffer, into which the rest is received now from ``source``."""
    size, inline = header.payload_bytes(dtype.itemsize), header.inline_bytes(dtype.itemsize)
    riding = riding[:inline]
    if size == inline:  # the small-message path: all of it is here
        return unpack(riding, header.keys, dtype)
    follows = c.scratch(size - inline, np.uint8, "ps payload")  # no page faults per request
    # communication: the rest of a long payload, after its header
    c.recv(follows, source, Tag.PS_PAYLOAD)
    if inline:  # the keys came with the header, the rows after it
        return riding.view(np.int64), follows.view(dtype)
    return unpack(follows, header.keys, dtype)


def version_and_rows(reply: np.ndarray, dtype: np.dtype) -> tuple[int, np.ndarray]:
    """A pull's answer: (the shard's version, its rows)."""
    return int(reply[:8].view(np.int64)[0]), reply[8:].view(dtype)


@dataclass
class Listening:
    """The receive a server posts for one worker's next request (``server.py``): its
    header, and its payload if short."""

    request: Request
    buf: np.ndarray  # HEADER_BYTES + INLINE_BYTES
    header: Header | None = None  # set once received
