"""Arrays a check reads from the memory the student's code writes: "in place", seen from outside.

Whether a student's code changed an array *in place* is a fact about the
student's interpreter: asked there, it is the kernel's word, which a graded
kernel could forge (``grading/README.md``). A ``SharedArrays`` makes it the
check's own observation. Each array is a file; the student's side maps it
(``mapped``: a ``numpy.memmap``, which the student's code updates like any
array) and the check reads it back through the descriptor it opened when it
made the file. What the code wrote into that array is then what the check
reads; an array the code replaced by a new one leaves the file as it was.

    with SharedArrays(remote=isinstance(cls, Remote)) as shared:
        files = {"values": shared.add("values", values)}
        obj = on_student(probe_that_builds_on, cls, files)   # the student maps them
        ...
        now = shared.read("values")                          # from the check's descriptor

When a lab is graded the student's side is the sandboxed kernel, which runs
in its own folder as its own user (``course/sandbox.py``): the files are
made there, owned by that user. Otherwise (JupyterLab, or a kernel in this
process) they go in a temporary folder. Reading never trusts the path: the
kernel may rename, replace or cut the file short; the descriptor still
names the file the check made, and a short read is a failure, never a crash.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import numpy as np

from minidist.labkit.checks import CheckFailed

File = tuple[str, str, tuple[int, ...]]  # (path, dtype, shape): what the student's side maps


class SharedArrays:
    """Files the student's side maps as arrays, each read back here by its descriptor."""

    def __init__(self, remote: bool) -> None:
        sandbox = json.loads(os.environ.get("MINIDIST_SANDBOX", "null")) if remote else None
        if sandbox:  # the graded kernel's own folder, as it is the kernel's user
            self.folder, self.uid, self.temporary = sandbox["workdir"], sandbox.get("uid"), False
        else:
            self.folder, self.uid, self.temporary = tempfile.mkdtemp(prefix="shared-"), None, True
        self.files: dict[str, tuple[int, np.dtype, tuple[int, ...], str]] = {}

    def add(self, name: str, array: np.ndarray) -> File:
        """A file holding a copy of ``array``; what the student's side maps (``mapped``)."""
        if not name.isidentifier() or name in self.files:
            raise ValueError(f"shared array names are new identifiers, got {name!r}")
        array = np.ascontiguousarray(array)
        path = os.path.join(self.folder, f".shared-{os.getpid()}-{name}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.pwrite(fd, array.tobytes(), 0)
        if self.uid is not None:
            os.fchown(fd, self.uid, self.uid)
        self.files[name] = (fd, array.dtype, array.shape, path)
        return path, array.dtype.str, array.shape

    def read(self, name: str) -> np.ndarray:
        """The array as it is now in the file this side made (whatever its path holds)."""
        fd, dtype, shape, _ = self.files[name]
        size = int(np.prod(shape)) * dtype.itemsize
        data = os.pread(fd, size, 0)
        if len(data) != size:
            raise CheckFailed(f"the file that holds {name} was cut short ({len(data)} of "
                              f"{size} bytes): leave the arrays you were given their size")
        return np.frombuffer(data, dtype).reshape(shape).copy()

    def close(self) -> None:
        for fd, _, _, path in self.files.values():
            os.close(fd)
            if not self.temporary:
                try:
                    os.unlink(path)
                except FileNotFoundError:  # the kernel may have removed it
                    pass
        self.files.clear()
        if self.temporary:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> SharedArrays:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def mapped(file: File) -> np.ndarray:
    """The student's side: the array of ``file`` (``SharedArrays.add``), mapped so that
    writing into it writes the file the check reads."""
    path, dtype, shape = file
    return np.memmap(path, dtype=np.dtype(dtype), mode="r+", shape=tuple(shape))
