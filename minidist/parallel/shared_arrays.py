"""Numpy arrays in OS shared memory, which other processes map by name (Hogwild's model).

``SharedArrays.create`` copies arrays into named blocks of
``multiprocessing.shared_memory`` (under /dev/shm on Linux); its ``spec()``
(block names, shapes, dtypes) is all another process needs to
``SharedArrays.attach`` them and see the same bytes as numpy arrays: a
write in one process is there in all of them, with no copy and no lock.
The creator unlinks the blocks when it closes them (``with`` does it even
when the body raises).
"""

from __future__ import annotations

import os
import shutil
import sys
from multiprocessing import shared_memory

import numpy as np


class SharedArrays:
    """Numpy arrays backed by named shared-memory blocks, usable from other processes.

    A context manager: ``with SharedArrays.create(arrays) as shared:`` calls ``close``
    on leaving, so the blocks leave /dev/shm even when the body raises."""

    def __init__(self, blocks: dict[str, tuple[shared_memory.SharedMemory, tuple, str]],
                 owner: bool):
        self.blocks, self.owner = blocks, owner
        self.arrays = {name: np.ndarray(shape, dtype=dtype, buffer=block.buf)
                       for name, (block, shape, dtype) in blocks.items()}

    @classmethod
    def create(cls, arrays: dict[str, np.ndarray]) -> SharedArrays:
        """Copy ``arrays`` into new blocks; the creator unlinks them in ``close``. Arrays
        of Python objects are refused (their pointers mean nothing in another process),
        and so are blocks /dev/shm has no room for (a write there would kill this
        process with SIGBUS)."""
        for name, array in arrays.items():
            if array.dtype.hasobject:
                raise TypeError(f"shared array {name!r} holds Python objects "
                                f"({array.dtype}): only plain numbers can be shared")
        needed = sum(max(array.nbytes, 1) for array in arrays.values())
        if os.path.isdir("/dev/shm") and needed > shutil.disk_usage("/dev/shm").free:
            raise MemoryError(f"the shared arrays need {needed / 2**20:.1f} MiB but /dev/shm "
                              f"has {shutil.disk_usage('/dev/shm').free / 2**20:.1f} MiB free "
                              "(a container's is 64 MiB unless started with --shm-size)")
        blocks: dict[str, tuple[shared_memory.SharedMemory, tuple, str]] = {}
        try:
            for name, array in arrays.items():
                block = shared_memory.SharedMemory(create=True, size=max(array.nbytes, 1))
                blocks[name] = (block, array.shape, array.dtype.str)
                np.ndarray(array.shape, array.dtype, buffer=block.buf)[...] = array
        except BaseException:
            cls(blocks, owner=True).close()
            raise
        return cls(blocks, owner=True)

    @classmethod
    def attach(cls, spec: dict[str, tuple[str, tuple, str]]) -> SharedArrays:
        """Map blocks made by another process, from its ``spec()``."""
        return cls({name: (shared_memory.SharedMemory(name=block), shape, dtype)
                    for name, (block, shape, dtype) in spec.items()}, owner=False)

    def spec(self) -> dict[str, tuple[str, tuple, str]]:
        """What another process needs to attach: block names, shapes, dtypes."""
        return {name: (block.name, shape, dtype)
                for name, (block, shape, dtype) in self.blocks.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __enter__(self) -> SharedArrays:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop this process's mapping; the creator also removes the blocks. A block
        whose array is still held elsewhere (``a = shared["w"]``) keeps its mapping until
        this process ends (unmapped, reading ``a`` would crash the interpreter); its name
        goes all the same."""
        for name, (block, _, _) in self.blocks.items():
            if sys.getrefcount(self.arrays.pop(name)) > 1:  # (getrefcount's own argument)
                _still_mapped.append(block)
            else:
                block.close()
            if self.owner:
                block.unlink()
        self.blocks.clear()


_still_mapped: list[shared_memory.SharedMemory] = []  # blocks whose arrays outlived close()
