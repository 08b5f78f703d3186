"""glove.c's record file: the co-occurrences as 16-byte records, read in chunks.

glove.c's ``cooccur`` writes every non-zero X_ij as one C struct
``{int word1; int word2; double val;}``, 16 bytes, word ids counted from
1; ``shuffle`` shuffles the file once; ``glove`` reads it record by record,
every epoch in the same order. Here the same file, byte for byte, so the
reference binary and minidist train on the very same records:

    RECORD                        the numpy dtype of one record
    to_records(row, col, val)     an in-memory array of them (ids from 0 in, from 1 stored)
    write_records(path, ...)      the shuffled file, written in chunks
    RecordFile(path).chunks(...)  consecutive records, a chunk at a time, into one buffer

Training streams the file: a thread holds one chunk (``CHUNK`` records,
1 MiB) at a time, so memory is the model plus a chunk per thread, not the
records (18 M records are 296 MB). An in-memory ``RECORD`` array trains the
same way, by slices.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

RECORD = np.dtype([("word1", "<i4"), ("word2", "<i4"), ("val", "<f8")])  # glove.c's CREC
CHUNK = 1 << 16  # records read at a time


def to_records(row: Any, col: Any, val: Any) -> np.ndarray:
    """A ``RECORD`` array of the counts X[row, col] = val (ids from 0; stored from 1)."""
    row, col, val = np.asarray(row), np.asarray(col), np.asarray(val, dtype=np.float64)
    if not len(row) == len(col) == len(val):
        raise ValueError(f"to_records: row, col and val have lengths {len(row)}, {len(col)} "
                         f"and {len(val)}; they must be equal")
    records = np.empty(len(val), RECORD)
    records["word1"], records["word2"], records["val"] = row + 1, col + 1, val
    return records


def write_records(path: str | os.PathLike, row: Any, col: Any, val: Any, seed: int | None = 0,
                  chunk: int = 1 << 20) -> RecordFile:
    """Write the counts as glove.c's record file, shuffled by ``seed`` (None: in order).

    glove.c's ``shuffle`` mixes the file once, in blocks that fit its memory;
    here one permutation of all the records. Memory: 8 bytes a record for
    the permutation, plus one chunk."""
    row, col, val = np.asarray(row), np.asarray(col), np.asarray(val)
    order = np.arange(len(val)) if seed is None else np.random.default_rng(seed).permutation(
        len(val))
    with open(path, "wb") as out:
        for start in range(0, len(order), chunk):
            part = order[start:start + chunk]
            to_records(row[part], col[part], val[part]).tofile(out)
    return RecordFile(path)


class RecordFile:
    """A file of glove.c records; ``len`` is how many it holds."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        if size % RECORD.itemsize:
            raise ValueError(f"{self.path}: {size} bytes is not a whole number of "
                             f"{RECORD.itemsize}-byte glove.c records")
        self.count = size // RECORD.itemsize

    def __len__(self) -> int:
        return self.count

    def chunks(self, lo: int, hi: int, size: int = CHUNK) -> Iterator[np.ndarray]:
        """Records lo:hi, ``size`` at a time, each chunk read into the same buffer (use it
        before asking for the next)."""
        buffer = np.empty(max(min(size, hi - lo), 0), RECORD)
        with open(self.path, "rb") as f:
            f.seek(lo * RECORD.itemsize)
            for start in range(lo, hi, size):
                part = buffer[:min(size, hi - start)]
                if f.readinto(part.view(np.uint8)) != part.nbytes:
                    raise ValueError(f"{self.path} ended before record {hi} (it changed?)")
                yield part

    def read(self) -> np.ndarray:
        """Every record, in memory (16 bytes each)."""
        return np.fromfile(self.path, RECORD)


def record_chunks(records: RecordFile | np.ndarray, lo: int, hi: int,
                  size: int = CHUNK) -> Iterator[np.ndarray]:
    """Records lo:hi of a file or of an in-memory ``RECORD`` array, a chunk at a time."""
    if isinstance(records, RecordFile):
        yield from records.chunks(lo, hi, size)
    else:
        for start in range(lo, hi, size):
            yield records[start:min(start + size, hi)]
