"""Agreeing before communicating: the header check every collective runs first.

A collective is a contract: every rank calls the same collective with the
same length, dtype, op and root. A rank that breaks the contract breaks the
schedule for all: its peers wait for messages that never come (a hang) or
receive a message of the wrong size (an error on one rank while the others
hang, or a wrong answer). A rank cannot see the mistake alone: it only
knows its own arguments.

So, before any data moves, the ranks allreduce a small header of integers,
one per field (collective, dtype, op, length, ...), with ``max``. Each
field travels twice, as ``v`` and ``-v``, so that one max gives both the
largest and the smallest value: ``min(v) = -max(-v)``. Every rank ends with
the same reduced header, so when two ranks disagree *every* rank sees it
and raises the same ``ValueError``. An unsupported dtype or op is encoded
as code 0 rather than raised at once, for the same reason: a rank that
raised alone would leave the others waiting.

The header travels in a packet of fixed size, ``[header | data slot]``, the
same on every rank whatever its arguments, so even ranks that called
different collectives exchange it safely. The packets are reduced by the
lesson's own ``recursive_doubling_allreduce``, given the packets' view of
the communicator (:class:`PacketView`): its messages carry the check's own
tag (``Tag.AGREEMENT``, so the check never meets the messages of the
collective it guards, nor the user's), its scratch is the second packet,
and its ``combine`` reduces both parts of a packet.

**The small-message path.** A checked allreduce of at most ``SMALL_BYTES``
by one of the latency algorithms (recursive doubling, the tree, the double
tree) rides in the data slot (:func:`checked_small_allreduce`): the check
is itself a recursive-doubling allreduce, so the data is reduced in the
same packets, ``log2 P`` rounds in all instead of the check's and then the
algorithm's. For recursive doubling this is its own schedule; the trees
exist to take few rounds, and on a vector this short the check's rounds
are already the fewest (each element is still reduced in one order,
the same bits on every rank). The bandwidth algorithms (naive, ps, ring)
never ride: what a student measures on them is their own schedule.

Cost: one recursive-doubling allreduce of ``PACKET_BYTES`` bytes:
``log2 P`` rounds for a power of two, two more otherwise. ``check=False``
skips it (a mismatch may then hang).

Speed: on a short vector this check *is* the allreduce, so its Python is
kept lean. Each rank's header is computed once per distinct call and
cached; the two packets, and their views as int64 and as each dtype, are
made once per communicator (``c.kept``); two headers agree exactly when
their bytes are equal, which one comparison tells; and with two ranks the
doubling is a single exchange, written out.
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from minidist.comm.collectives.doubling import recursive_doubling_allreduce
from minidist.comm.ops import DTYPE_CODES as _DTYPE_CODES
from minidist.comm.ops import DTYPES, OPS
from minidist.comm.ops import OP_CODES as _OP_CODES
from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator

MAX_FIELDS = 8  # collective, dtype, op and up to five more
HEADER_BYTES = 2 * 8 * MAX_FIELDS  # each field as v and -v, int64
SMALL_BYTES = 256  # the data slot: vectors up to this size ride with the header
PACKET_BYTES = HEADER_BYTES + SMALL_BYTES
TAG = Tag.AGREEMENT
NO_OP = object()  # what a collective that reduces nothing (broadcast, gather, ...) checks
# as its op; a reducing one passes the caller's op, so that ``op=None`` is refused as any other


RIDING_ALGORITHMS = ("recursive_doubling", "tree", "double_tree")  # the latency algorithms


def rides_with_check(algorithm: str, p: int, nbytes: int) -> bool:
    """True when a checked allreduce's data travels inside the check's packets: one of
    the latency algorithms on at most ``SMALL_BYTES`` (see the module docstring)."""
    return algorithm in RIDING_ALGORITHMS and nbytes <= SMALL_BYTES and p > 1


def dtype_code(dtype: np.dtype) -> int:
    """1..4 for a supported dtype, 0 for any other."""
    return _DTYPE_CODES.get(np.dtype(dtype), 0)


def op_code(op: object) -> int:
    """1..4 for a supported reduction op, 0 for any other (None, a list, ``NO_OP``)."""
    return _OP_CODES.get(op, 0) if isinstance(op, str) else 0


def _check_codes(what: str, dtype: np.dtype, op: object) -> None:
    """Raise if the dtype or op (``NO_OP``: none) is unsupported; the same on every rank."""
    if dtype_code(dtype) == 0:
        raise TypeError(f"{what}: dtype {np.dtype(dtype)} is not supported; "
                        f"use one of {', '.join(str(d) for d in DTYPES)}")
    if op is not NO_OP and op_code(op) == 0:
        raise ValueError(f"{what}: op {op!r} is not supported; use one of {OPS}")


def check_same_everywhere(c: Communicator, what: str, dtype: np.dtype, op: object = NO_OP,
                          check: bool = True, **fields: int | tuple) -> None:
    """Raise the same error on every rank unless all ranks agree on ``fields``.

    ``fields`` are what every rank must share: integers (``length=``,
    ``root=``...) or tuples (a shape: compared by a crc32 of it, named as
    itself in the error); the collective ``what``, ``dtype`` and ``op`` are
    checked too (``op``: the caller's, whatever it is; ``NO_OP`` for a collective
    that reduces nothing). With ``check=False`` or one rank, only the local checks run
    (no message).
    """
    if not check or c.size == 1:
        _check_codes(what, dtype, op)
        return
    codes = tuple(zlib.crc32(repr(v).encode()) if isinstance(v, tuple) else v
                  for v in fields.values())
    _exchange(c, what, np.dtype(dtype), op, fields, codes, None, None)


def as_array(arr: object) -> tuple[np.ndarray, str]:
    """``arr`` as a C-contiguous array (copied only if it is not one), and "" ; for what
    makes no array (a ragged list), an empty float64 stand-in and why: the caller agrees
    on that (a field ``valid_in``) before raising, so one rank's mistake is an error on
    every rank, not a hang on the others."""
    try:
        return np.require(arr, requirements="C"), ""
    except (ValueError, TypeError) as err:
        return np.empty(0), f"the data is no array ({err})"


def checked_small_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                            **fields: int) -> None:
    """The check and a recursive-doubling allreduce of ``src`` (<= SMALL_BYTES) in one.

    Each round reduces both parts of the packets (``max`` for the header,
    ``op`` for the data); the data is trusted only once the header says all
    ranks agree on ``fields`` (the allreduce's, in the order it checks them
    when the data does not ride) and on dtype and op.
    """
    _exchange(c, "allreduce", src.dtype, op, fields, tuple(fields.values()), src, out)


class Packets:
    """The two packets of the check, allocated once per communicator (``c.kept``).

    One packet is reduced into, the other receives the partner's; the
    header of each is also seen as int64 and its data slot as each dtype,
    views made once here rather than on every call (making a numpy view
    costs about as much as adding two short vectors).
    """

    def __init__(self) -> None:
        self.buffers = (np.zeros(PACKET_BYTES, np.uint8), np.zeros(PACKET_BYTES, np.uint8))
        self.headers = tuple(b[:HEADER_BYTES].view(np.int64) for b in self.buffers)
        self._slots: dict[tuple[np.dtype, int], tuple[np.ndarray, np.ndarray]] = {}

    def slots(self, dtype: np.dtype, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``n`` items of each packet's data slot, as arrays of ``dtype``."""
        found = self._slots.get((dtype, n))
        if found is None:
            found = self._slots[dtype, n] = tuple(b[HEADER_BYTES:].view(dtype)[:n]
                                                  for b in self.buffers)
        return found


class PacketView:
    """The communicator as the check's recursive doubling sees it.

    Messages carry ``Tag.AGREEMENT``; the scratch buffer is the second
    packet; ``combine(op, first, second)`` reduces the headers with max (not
    charged as reduction work: bookkeeping) and the data slots, if any,
    with ``op`` (charged, as the reduction it is).
    """

    def __init__(self, c: Communicator, packets: Packets,
                 data: tuple[np.ndarray, np.ndarray] | None) -> None:
        self.c, self.packets, self.data = c, packets, data
        self.rank, self.size = c.rank, c.size

    def send(self, buf: np.ndarray, dest: int) -> None:
        self.c.send(buf, dest, TAG)

    def recv(self, buf: np.ndarray, source: int) -> np.ndarray:
        return self.c.recv(buf, source, TAG)

    def sendrecv(self, sendbuf: np.ndarray, dest: int, recvbuf: np.ndarray,
                 source: int) -> np.ndarray:
        return self.c.sendrecv(sendbuf, dest, recvbuf, source, TAG, TAG)

    def scratch(self, n: int, dtype: np.dtype) -> np.ndarray:
        return self.packets.buffers[1]

    def combine(self, op: str, acc: np.ndarray, incoming: np.ndarray,
                incoming_first: bool = False) -> None:
        headers = self.packets.headers
        np.maximum(headers[0], headers[1], out=headers[0])
        if self.data is not None:
            self.c.combine(op, self.data[0], self.data[1], incoming_first)


class Header(NamedTuple):
    """This rank's header, as int64 values and as bytes; ``supported``: dtype and op are."""

    values: np.ndarray
    raw: bytes
    supported: bool


def header(what: str, dtype: np.dtype, op: object, values: tuple[int, ...]) -> Header:
    """Each field as ``v`` and ``-v`` (an op that cannot be a cache key, a list say, as
    any unsupported one: it is named in the error, not hashed)."""
    try:
        return _header(what, dtype, op, values)
    except TypeError:  # unhashable
        return _header(what, dtype, None, values)


@lru_cache(maxsize=4096)
def _header(what: str, dtype: np.dtype, op: str | None, values: tuple[int, ...]) -> Header:
    """:func:`header`, cached: a training loop repeats the same calls."""
    codes = (zlib.crc32(what.encode()), dtype_code(dtype), op_code(op), *values)
    if len(codes) > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS - 3} fields can be checked, got {len(values)}")
    codes += (0,) * (MAX_FIELDS - len(codes))
    mine = np.array(codes + tuple(-v for v in codes), np.int64)
    mine.flags.writeable = False
    return Header(mine, mine.tobytes(), bool(codes[1] and (codes[2] or op is NO_OP)))


def _exchange(c: Communicator, what: str, dtype: np.dtype, op: object, fields: dict,
              values: tuple, src: np.ndarray | None, out: np.ndarray | None) -> None:
    """Allreduce the header packets (with ``src`` in the data slot, if given); raise on
    every rank if the headers differ; else write the reduced data into ``out``."""
    mine = header(what, dtype, op, values)
    packets = c.kept(Packets, Packets)
    packets.headers[0][...] = mine.values
    data_ok = mine.supported and src is not None and src.size > 0
    if data_ok:
        data = packets.slots(dtype, src.size)
        data[0][...] = src

    first, second = packets.buffers
    if c.size == 2:
        # two ranks: the doubling is one exchange, written out here because on the
        # shortest calls the Python of the general function and its PacketView is a
        # good part of the time; each rank sees the other's header whole, so equal
        # headers mean agreement
        peer = 1 - c.rank
        # communication: my packet out, the other rank's in
        c.sendrecv(first, peer, second, peer, TAG, TAG)
        if data_ok and packets.headers[1].tobytes() == mine.raw:
            c.combine(op, data[0], data[1], peer < c.rank)
        else:
            np.maximum(packets.headers[0], packets.headers[1], out=packets.headers[0])
    else:
        # communication: the lesson's recursive doubling, on the packets
        recursive_doubling_allreduce(first, PacketView(c, packets, data if data_ok else None), op)
    reduced = packets.headers[0]
    if reduced.tobytes() != mine.raw:  # equal exactly when every rank agrees
        _raise_disagreement(c, what, dtype, op, fields, reduced)
    if not mine.supported:
        _check_codes(what, dtype, op)
    if data_ok:
        out[...] = data[0]


def _raise_disagreement(c: Communicator, what: str, dtype: np.dtype, op: object,
                        fields: dict, reduced: np.ndarray) -> None:
    """Name the first field on which the ranks disagree (the same one on every rank): the
    collective first (other collectives' fields mean other things), then a ``valid_...``
    field (data, ``out=`` or counts that one rank got wrong: its stand-in differs in
    dtype and length too, which would only mislead the others)."""
    names = ("collective", "dtype", "op", *fields)
    order = sorted(range(len(names)),
                   key=lambda i: (i > 0, not names[i].startswith("valid_")))
    for i in order:
        name = names[i]
        largest, smallest = int(reduced[i]), -int(reduced[MAX_FIELDS + i])
        if largest != smallest:
            value = {"collective": what, "dtype": np.dtype(dtype).name, "op": op}.get(name)
            if i >= 3:
                value = fields[name] if isinstance(fields[name], tuple) else int(fields[name])
            codes = "" if isinstance(value, tuple) else f"; codes from {smallest} to {largest}"
            raise ValueError(f"{what}: ranks disagree on {name} (rank {c.rank} has "
                             f"{value!r}{codes})")
    raise AssertionError("headers differ but no field does")  # unreachable
