"""Keys: how a parameter server names the numbers it holds, and which server holds each.

A parameter server stores *rows*. Every row has an integer **key**; a model's
parameters are **tables** of rows laid end to end in one key space:

    KeyLayout({"W1": (64, 128), "b1": (1, 128), "emb": (10_000, 50)})
    keys 0..63 are W1's rows, key 64 is b1, keys 65..10_064 are emb's rows

A dense tensor of shape (a, b, ...) is a table of ``a`` rows of width
``b·...`` (a vector is one row); an embedding table is a table of its rows,
and a worker asks only for the rows its batch touches (sparse keys).

The key space is cut into one contiguous **range** per server (ps-lite's
rule: a key range per server, so that routing a key is one binary search).
The cut balances *values*, not keys: each range holds about 1/S of all the
numbers, cut at row boundaries, so an MLP's big weight matrix does not land
on one server while another holds the biases. Given a ``load`` per key (how
often it is requested, times its bytes) the cut balances that instead: the
servers of popular keys then hold fewer of them (``hotspots.py``).

On the wire a request carries its keys (int64), in the worker's order, and
for a push their rows' values concatenated in the same order:
``8·k + itemsize·Σ widths`` bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

import numpy as np


class KeyLayout:
    """Named tables of rows, numbered by one key space; ``split(S)`` gives the ranges."""

    def __init__(self, tables: Mapping[str, tuple[int, int]]) -> None:
        if not tables:
            raise ValueError("KeyLayout needs at least one table")
        self.tables: dict[str, tuple[int, int]] = {}
        self.first_key: dict[str, int] = {}
        key = 0
        for name, (rows, width) in tables.items():
            if rows < 1 or width < 1:
                raise ValueError(f"table {name!r}: rows and width must be >= 1, "
                                 f"got ({rows}, {width})")
            self.tables[name] = (int(rows), int(width))
            self.first_key[name] = key
            key += int(rows)
        self.num_keys = key
        self.widths = np.concatenate([np.full(r, w, np.int64) for r, w in self.tables.values()])
        self.offsets = np.zeros(self.num_keys + 1, np.int64)  # key k's values: offsets[k]..[k+1]
        np.cumsum(self.widths, out=self.offsets[1:])
        self.num_values = int(self.offsets[-1])

    @classmethod
    def of_arrays(cls, shapes: Mapping[str, tuple[int, ...]]) -> KeyLayout:
        """A table per array: shape (a, b, ...) is ``a`` rows of width b·...; a vector one row."""
        return cls({name: (1, prod(shape)) if len(shape) <= 1 else (shape[0], prod(shape[1:]))
                    for name, shape in shapes.items()})

    def keys(self, table: str, rows: np.ndarray | None = None) -> np.ndarray:
        """The keys of ``table``'s ``rows`` (all its rows when None)."""
        if table not in self.tables:
            raise KeyError(f"no table {table!r}; tables are {list(self.tables)}")
        count = self.tables[table][0]
        if rows is None:
            return np.arange(self.first_key[table], self.first_key[table] + count)
        rows = np.asarray(rows, np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= count):
            raise ValueError(f"table {table!r} has rows 0..{count - 1}, got rows "
                             f"{rows.min()}..{rows.max()}")
        return self.first_key[table] + rows

    def all_keys(self) -> np.ndarray:
        return np.arange(self.num_keys)

    def split(self, servers: int, load: np.ndarray | None = None) -> list[tuple[int, int]]:
        """``servers`` contiguous key ranges ``(first, end)``, each about 1/S of the values,
        or of the ``load`` (a weight per key, e.g. the bytes it is expected to move)."""
        if servers < 1:
            raise ValueError(f"a parameter server needs at least one server, got {servers}")
        if servers > self.num_keys:
            raise ValueError(f"{servers} servers but only {self.num_keys} keys: "
                             f"some server would hold nothing")
        if load is None:
            cumulative = self.offsets[1:]
        else:
            load = np.asarray(load, np.float64)
            if load.shape != (self.num_keys,) or not (load >= 0).all() \
                    or not np.isfinite(load).all():
                raise ValueError(f"load: one finite weight >= 0 per key ({self.num_keys}), "
                                 f"got shape {load.shape}")
            cumulative = np.cumsum(load)
        total = cumulative[-1]
        # the first key whose cumulative weight reaches s/S of the total ends range s
        key_cuts = np.searchsorted(cumulative, [total * s / servers for s in range(1, servers)])
        cuts = [0]
        for k, cut in enumerate(key_cuts):  # keep each range non-empty
            cuts.append(min(max(int(cut) + 1, cuts[-1] + 1), self.num_keys - (servers - 1 - k)))
        cuts.append(self.num_keys)
        return [(cuts[s], cuts[s + 1]) for s in range(servers)]

    def check(self, keys: np.ndarray) -> np.ndarray:
        """``keys`` as a sorted-or-not int64 vector of distinct keys of this layout, or a
        clear error."""
        keys = np.asarray(keys)
        if keys.ndim != 1 or not np.issubdtype(keys.dtype, np.integer):
            raise ValueError(f"keys must be a 1-D integer array, got {keys.dtype} of "
                             f"shape {keys.shape}")
        keys = keys.astype(np.int64, copy=False)
        if keys.size and (keys.min() < 0 or keys.max() >= self.num_keys):
            bad = keys[(keys < 0) | (keys >= self.num_keys)][0]
            raise KeyError(f"key {bad} is outside every server's range 0..{self.num_keys - 1}")
        ascending = keys if np.all(keys[1:] > keys[:-1]) else np.sort(keys)
        if np.any(ascending[1:] == ascending[:-1]):
            raise ValueError("keys must be distinct (sum the rows of a repeated key first)")
        return keys

    def value_count(self, keys: np.ndarray) -> int:
        """How many numbers the rows of ``keys`` hold."""
        return int(self.widths[keys].sum())

    def value_index(self, keys: np.ndarray, base: int = 0,
                    width: int = 1) -> slice | np.ndarray:
        """Where the rows of ``keys`` lie in a vector of values that starts at key ``base``,
        counted in units of ``width`` values (1, or the width every row there has: then
        one index per row): a slice when the keys are one ascending run (a dense pull: no
        gather), else an index array, rows in the order of ``keys``."""
        first = self.offsets[base]
        if keys.size and keys[-1] - keys[0] + 1 == keys.size and np.all(np.diff(keys) == 1):
            return slice(int(self.offsets[keys[0]] - first) // width,
                         int(self.offsets[keys[-1] + 1] - first) // width)
        if width > 1:  # rows of one width: a row's number is its key's
            return keys - base
        return spans(self.offsets[keys] - first, self.widths[keys])

    def flatten(self, arrays: Mapping[str, np.ndarray], dtype=np.float64) -> np.ndarray:
        """Every table's values, in key order, as one vector (a model's initial values)."""
        missing = set(self.tables) - set(arrays)
        if missing:
            raise KeyError(f"no array for tables {sorted(missing)}")
        out = np.empty(self.num_values, dtype)
        for name, (rows, width) in self.tables.items():
            start = self.offsets[self.first_key[name]]
            array = np.asarray(arrays[name])
            if array.size != rows * width:
                raise ValueError(f"table {name!r} holds {rows}x{width} values, "
                                 f"the array has shape {array.shape}")
            out[start:start + rows * width] = array.reshape(-1)
        return out

    def table_slice(self, name: str) -> slice:
        """Where table ``name`` lies in a vector of all values (``flatten``'s order)."""
        start = int(self.offsets[self.first_key[name]])
        rows, width = self.tables[name]
        return slice(start, start + rows * width)


def common_width(widths: np.ndarray) -> int:
    """The width all these rows have (rows of one table), so that they move and are
    indexed as rows, one index per row; 1 (single values) if they differ."""
    return int(widths[0]) if widths.size and bool(np.all(widths == widths[0])) else 1


def spans(starts: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """The ranges ``starts[i] .. starts[i] + widths[i]`` concatenated, as one index array."""
    if widths.size and np.all(widths == widths[0]):  # rows of one width: one broadcast
        return (starts[:, None] + np.arange(widths[0])).reshape(-1)
    ends = np.cumsum(widths)
    return np.repeat(starts - (ends - widths), widths) + np.arange(ends[-1] if ends.size else 0)


def gather_index(layout: KeyLayout, keys: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Where the rows of ``keys[order]`` lie among the rows of ``keys``, concatenated:
    ``rows[index]`` puts rows given in the order of ``keys`` into ``order``'s."""
    widths = layout.widths[keys]
    starts = np.cumsum(widths) - widths
    return spans(starts[order], widths[order])

