"""Beneath the worker and the server: what a request works out once per key set, not per call.

A training step pulls a set of keys, then pushes the gradient of the same
keys, and the next step often asks for the same set again (every key of a
dense model). Checking the keys, cutting them by server, packing their
bytes and finding their values' places is the same work each time, and for
a small request it costs more than moving the bytes. Two things here keep
it to once per key set:

- ``Route``: a worker's request worked out: the keys checked, and per
  server its keys (in the caller's order: a server takes keys in any
  order, so they are not put into key order), their packed bytes, its
  values' count, and where its rows lie in the caller's order
  (``Part.at``), so that a push's rows go straight into the payload (one
  copy, no reordered temporary), or onto the wire as they lie when they
  follow their header on their own (one server, or keys already grouped
  by server), and a pull's answers straight into the result.
- ``LastKeys``: a memo of one entry keyed on a key array: the last key set
  and what was built from it (a worker's ``Route``; a server's index of the
  values of a worker's keys, ``KeyLayout.value_index``). Asking again with
  equal keys costs one comparison, O(k).

Rows of one width (one table, an embedding's rows) move as rows (one index
per row, ``width`` values each); mixed widths as single values.

- ``FramedShard``: a server's values kept behind 8 free bytes in one buffer,
  so that a pull of values from the shard's first on (every key of a dense
  model) is answered where the values lie, the version written into those
  bytes: the answer's layout (``messages.py``) without copying the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from minidist.parallel.ps.keys import KeyLayout, common_width, gather_index

T = TypeVar("T")


class LastKeys(Generic[T]):
    """``memo(keys)``: ``build(keys)``, or what it built for the last keys if equal."""

    def __init__(self, build: Callable[[np.ndarray], T]) -> None:
        self.build, self.keys, self.value = build, None, None

    def __call__(self, keys: np.ndarray) -> T:
        last = self.keys
        # their bytes compared: a tenth of np.array_equal's time on a few keys
        if (last is None or not isinstance(keys, np.ndarray) or keys.dtype != last.dtype
                or keys.shape != last.shape or keys.tobytes() != self.key_bytes):
            self.value = self.build(keys)
            self.keys = np.array(keys, copy=True)  # the caller may change its array later
            self.key_bytes = self.keys.tobytes()
        return self.value


@dataclass
class Part:
    """What one server gets of a request."""

    server: int
    keys: np.ndarray  # in the caller's order
    count: int  # values its rows hold
    key_bytes: np.ndarray  # the keys as the payload's first 8k bytes
    at: slice | np.ndarray  # where its rows lie in the caller's, in units of ``width``


class Route:
    """A request for the keys ``keys`` of ``layout``, cut by the servers' ``ranges``."""

    def __init__(self, layout: KeyLayout, ranges: list[tuple[int, int]],
                 keys: np.ndarray) -> None:
        self.keys = np.ascontiguousarray(layout.check(keys))
        widths = layout.widths[self.keys]
        self.count = int(widths.sum())
        self.width = common_width(widths)
        # the server of each key; the keys grouped by server, each group in the caller's order
        owner = np.searchsorted([first for first, _ in ranges[1:]], self.keys, side="right")
        regroup = not np.all(owner[1:] >= owner[:-1])
        order = np.argsort(owner, kind="stable") if regroup else None
        grouped = self.keys[order] if regroup else self.keys
        if regroup and self.width == 1:  # each value's place, not each row's
            order = gather_index(layout, self.keys, order)
        self.parts: list[Part] = []
        cuts = np.cumsum(np.bincount(owner, minlength=len(ranges)))[:-1]
        start = 0  # in units of width
        for server, part in enumerate(np.split(grouped, cuts)):
            count = layout.value_count(part)
            end = start + count // self.width
            self.parts.append(Part(server, part, count, part.view(np.uint8),
                                   slice(start, end) if order is None else order[start:end]))
            start = end

    def pack_push(self, part: Part, gradient: np.ndarray, payload: np.ndarray) -> np.ndarray:
        """``payload`` (bytes) filled with ``part``'s keys, then its rows of ``gradient``
        (the caller's order), in the order of its keys: ``messages.unpack``'s layout."""
        head = part.key_bytes.size
        payload[:head] = part.key_bytes
        self.take_rows(part, gradient, payload[head:])
        return payload

    def take_rows(self, part: Part, gradient: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out`` (bytes) filled with ``part``'s rows of ``gradient``, in the order of its
        keys."""
        rows = out.view(gradient.dtype).reshape(-1, self.width)
        mine = gradient.reshape(-1, self.width)
        if isinstance(part.at, slice):
            rows[...] = mine[part.at]
        else:
            np.take(mine, part.at, axis=0, out=rows)
        return out

    def rows_as_they_lie(self, part: Part, gradient: np.ndarray) -> np.ndarray | None:
        """``part``'s rows of ``gradient`` as bytes, a view, if they lie in one run (one
        server, or keys grouped by server); else None (``take_rows`` copies them)."""
        if not isinstance(part.at, slice):
            return None
        return gradient.reshape(-1, self.width)[part.at].reshape(-1).view(np.uint8)

    def assemble(self, rows: list[np.ndarray]) -> np.ndarray:
        """The servers' rows (one array per part, in the order of its keys) in the
        caller's order."""
        if len(rows) == 1 and isinstance(self.parts[0].at, slice):
            return rows[0]  # one server: its fresh answer as it stands
        out = np.empty((self.count // self.width, self.width), rows[0].dtype)
        for part, part_rows in zip(self.parts, rows, strict=True):
            out[part.at] = part_rows.reshape(-1, self.width)
        return out.reshape(-1)


class FramedShard:
    """A shard's ``values`` copied behind 8 free bytes, in one buffer (``self.values``),
    indexed in units of ``width`` values (``KeyLayout.value_index``)."""

    def __init__(self, values: np.ndarray, width: int = 1) -> None:
        self.buffer = np.empty(8 + values.nbytes, np.uint8)
        self.version = self.buffer[:8].view(np.int64)  # the answer's first 8 bytes
        self.values = self.buffer[8:].view(values.dtype)
        self.values[...] = values
        self.rows = self.values.reshape(-1, width)  # the same values, a row per index
        self.unit = width * values.itemsize  # bytes per index

    def answer(self, version: int, index: slice | np.ndarray) -> np.ndarray | None:
        """A pull's answer (``version``, then the values at ``index``) as a view of the
        buffer, if ``index`` is a run from the first value; else None."""
        if not isinstance(index, slice) or index.start != 0:
            return None
        self.version[0] = version
        return self.buffer[:8 + index.stop * self.unit]

    def gathered(self, version: int, index: slice | np.ndarray, into: np.ndarray) -> np.ndarray:
        """A pull's answer for any ``index``, written into the byte buffer ``into`` (8 +
        the rows' bytes): ``version``, then the values at ``index``, gathered."""
        into[:8].view(np.int64)[0] = version
        rows = into[8:].view(self.values.dtype).reshape(-1, self.rows.shape[1])
        if isinstance(index, slice):
            rows[...] = self.rows[index]
        else:
            np.take(self.rows, index, axis=0, out=rows)
        return into
