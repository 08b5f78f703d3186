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
different collectives exchange it safely. For a recursive-doubling
allreduce of at most ``SMALL_BYTES`` the data rides in the slot
(:func:`checked_small_allreduce`): one message per round instead of two,
which matters when latency is all there is.

Cost: one recursive-doubling allreduce of ``PACKET_BYTES`` bytes:
``log2 P`` rounds for a power of two, two more otherwise. ``check=False``
skips it (a mismatch may then hang).
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from minidist.comm.allreduce_doubling import recursive_doubling_allreduce
from minidist.comm.communicator import Communicator

DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32), np.dtype(np.int64))
OPS = ("sum", "max", "min", "prod")
_DTYPE_CODES = {dtype: k + 1 for k, dtype in enumerate(DTYPES)}
_OP_CODES = {op: k + 1 for k, op in enumerate(OPS)}

MAX_FIELDS = 8  # collective, dtype, op and up to five more
HEADER_BYTES = 2 * 8 * MAX_FIELDS  # each field as v and -v, int64
SMALL_BYTES = 256  # the data slot: vectors up to this size ride with the header
PACKET_BYTES = HEADER_BYTES + SMALL_BYTES


def dtype_code(dtype: np.dtype) -> int:
    """1..4 for a supported dtype, 0 for any other."""
    return _DTYPE_CODES.get(np.dtype(dtype), 0)


def op_code(op: str | None) -> int:
    """1..4 for a supported reduction op, 0 for any other (or None)."""
    return _OP_CODES.get(op, 0)


def _check_codes(what: str, dtype: np.dtype, op: str | None) -> None:
    """Raise if the dtype or op (None: no op) is unsupported; the same on every rank."""
    if dtype_code(dtype) == 0:
        raise TypeError(f"{what}: dtype {np.dtype(dtype)} is not supported; "
                        f"use one of {', '.join(str(d) for d in DTYPES)}")
    if op is not None and op_code(op) == 0:
        raise ValueError(f"{what}: op {op!r} is not supported; use one of {OPS}")


def check_same_everywhere(c: Communicator, what: str, dtype: np.dtype, op: str | None = None,
                          check: bool = True, **fields: int) -> None:
    """Raise the same error on every rank unless all ranks agree on ``fields``.

    ``fields`` are integers every rank must share (``length=``, ``root=``...);
    the collective ``what``, ``dtype`` and ``op`` are checked too. With
    ``check=False`` or one rank, only the local checks run (no message).
    """
    if not check or c.size == 1:
        _check_codes(what, dtype, op)
        return
    _exchange(c, what, dtype, op, fields, None, None)


def checked_small_allreduce(src: np.ndarray, out: np.ndarray, c: Communicator, op: str,
                            **fields: int) -> None:
    """The check and a recursive-doubling allreduce of ``src`` (<= SMALL_BYTES) in one.

    Each round reduces both parts of the packets (``max`` for the header,
    ``op`` for the data); the data is trusted only once the header says all
    ranks agree.
    """
    _exchange(c, "allreduce", src.dtype, op, fields, src, out)


_HEADER = struct.Struct(f"<{2 * MAX_FIELDS}q")
_COLLECTIVE_CODES: dict[str, int] = {}


def _exchange(c: Communicator, what: str, dtype: np.dtype, op: str | None, fields: dict,
              src: np.ndarray | None, out: np.ndarray | None) -> None:
    collective = _COLLECTIVE_CODES.get(what) or _COLLECTIVE_CODES.setdefault(
        what, zlib.crc32(what.encode()))
    values = (collective, dtype_code(dtype), op_code(op), *fields.values())
    if len(values) > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS - 3} fields can be checked, got {list(fields)}")
    values += (0,) * (MAX_FIELDS - len(values))
    packet = np.zeros(PACKET_BYTES, np.uint8)
    _HEADER.pack_into(packet, 0, *values, *[-v for v in values])
    nbytes = 0 if src is None else src.nbytes
    data = slice(HEADER_BYTES, HEADER_BYTES + nbytes)
    if nbytes:
        packet[data] = src.view(np.uint8)
    data_ok = nbytes > 0 and values[1] > 0 and values[2] > 0

    def combine(acc: np.ndarray, incoming: np.ndarray) -> None:
        header = acc[:HEADER_BYTES].view(np.int64)
        # the header's max is bookkeeping, not charged as reduction work
        np.maximum(header, incoming[:HEADER_BYTES].view(np.int64), out=header)
        if data_ok:
            c.combine(op, acc[data].view(dtype), incoming[data].view(dtype))

    # communication: one recursive-doubling allreduce of the packets
    recursive_doubling_allreduce(packet, packet, c, "max", combine)
    reduced = _HEADER.unpack_from(packet)
    if any(reduced[i] + reduced[MAX_FIELDS + i] for i in range(MAX_FIELDS)):
        names = ("collective", "dtype", "op", *fields)
        for i, name in enumerate(names):
            largest, smallest = reduced[i], -reduced[MAX_FIELDS + i]
            if largest != smallest:
                mine = {"collective": what, "dtype": np.dtype(dtype).name, "op": op}.get(
                    name, values[i])
                raise ValueError(f"{what}: ranks disagree on {name} (rank {c.rank} has "
                                 f"{mine!r}; codes from {smallest} to {largest})")
    if not (values[1] and (values[2] or op is None)):
        _check_codes(what, dtype, op)
    if out is not None:
        out[...] = packet[data].view(dtype)
