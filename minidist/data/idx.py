"""The IDX file format, in which MNIST is distributed.

An IDX file is an n-dimensional array written as plainly as possible:

    bytes 0-1   zero
    byte  2     the element type: 0x08 uint8, 0x09 int8, 0x0B int16,
                0x0C int32, 0x0D float32, 0x0E float64
    byte  3     the number of dimensions d
    then        d sizes, each a big-endian uint32
    then        the elements, big-endian, in row-major (C) order

So MNIST's training images are ``00 00 08 03 | 60000 28 28 | 47,040,000
bytes`` and its labels ``00 00 08 01 | 60000 | 60,000 bytes``. The files
are usually gzip-compressed (``.gz``); we recognise gzip by its first two
bytes (1f 8b), not by the file's name.

Reading checks everything the header promises: the zero bytes, a known
type, and exactly as many data bytes as the sizes call for. A truncated
download then fails here with a clear message instead of giving a model
silently wrong data.
"""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np

# IDX type code -> numpy element type (big-endian, as stored in the file).
IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
GZIP_MAGIC = b"\x1f\x8b"


class IDXFormatError(ValueError):
    """A file that does not hold a well-formed IDX array."""


def read_file_bytes(path: str | os.PathLike) -> bytes:
    """The contents of ``path``, decompressed if it starts like a gzip file."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as error:
            raise IDXFormatError(f"{path}: damaged gzip data ({error})") from error
    return data


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """The array held by the IDX bytes ``data``, in native byte order.

    Cost: one pass over the data to convert the byte order, O(size).
    """
    if len(data) < 4:
        raise IDXFormatError(f"{source}: {len(data)} bytes, too short for an IDX header")
    zero, type_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0:
        raise IDXFormatError(f"{source}: bad magic number {data[:4].hex()}, "
                             "an IDX file starts with two zero bytes")
    if type_code not in IDX_DTYPES:
        raise IDXFormatError(f"{source}: unknown IDX type code 0x{type_code:02x}")
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise IDXFormatError(f"{source}: header promises {ndim} sizes but the file ends first")
    shape = struct.unpack(f">{ndim}I", data[4:header_size])
    dtype = IDX_DTYPES[type_code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(data) - header_size
    if found != expected:
        problem = "truncated" if found < expected else "has trailing bytes"
        raise IDXFormatError(f"{source}: {problem}: shape {shape} of {dtype.name} needs "
                             f"{expected} data bytes, found {found}")
    array = np.frombuffer(data, dtype=dtype, offset=header_size).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in the IDX file ``path`` (raw or gzip-compressed)."""
    return parse_idx(read_file_bytes(path), os.fspath(path))


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file, gzip-compressed when ``path`` ends in ``.gz``."""
    array = np.asarray(array)
    codes = {dtype.newbyteorder("="): code for code, dtype in IDX_DTYPES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        raise IDXFormatError(f"IDX cannot store {array.dtype}; use one of "
                             f"{sorted(d.name for d in codes)}")
    header = struct.pack(f">HBB{array.ndim}I", 0, codes[native], array.ndim, *array.shape)
    data = header + np.ascontiguousarray(array, dtype=IDX_DTYPES[codes[native]]).tobytes()
    opener = gzip.open if os.fspath(path).endswith(".gz") else open
    with opener(path, "wb") as file:
        file.write(data)
