"""The memory a process holds, as the operating system counts it: for checks about memory.

A task whose point is memory (Lab 7's checkpointing keeps fewer
activations, Lab 8's ZeRO keeps a shard of the optimiser state) cannot take
the student's kernel's word for how much it kept: a kernel can patch
whatever counts it. The kernel's resident memory is counted by Linux, and
the grader reads it from ``/proc/<pid>/status`` of the kernel's process,
whose pid it knows from starting it (``minidist.course.trusted``). In
JupyterLab and in the test suite the student's code runs in this process,
and the same check reads this process's.

The check resets the process's peak (``/proc/<pid>/clear_refs``), lets the
student's code run, and reads how far the resident set grew above where it
stood, at its peak and at the end (what the code still holds): memory the
code touched, whatever it reports. So that an honest answer's count is the
same on every run, whatever the process did before, the process that
allocates (``memory_of``):

1. sets glibc's allocator to map every array of 128 KiB or more on its own
   and give it back when freed (otherwise freed memory stays in the heap,
   and a later array reuses it unseen or lands beside it, as the process's
   history has it: the count would move from run to run), frees what
   only reference cycles keep, and gives its free heap back to the system;
2. runs the student's code;
3. gives its free memory back again, and the count is read;
4. sets the allocator back to thresholds under which large temporaries are
   reused from the heap: left as in 1, each one would be mapped and faulted
   in anew, and numerical code slows down several times.

The sizes are chosen so that what the claim is about (megabytes of
activations, of optimiser state) dwarfs what the interpreter itself
allocates.

What it does not see: memory the code keeps outside the process (a file it
writes and reads back); memory it reserves and never writes (``np.zeros``
costs a page only once the page is written); and memory it keeps from
being given back, so as to reuse it unseen (changing the C allocator's
settings, or its ``malloc_trim``, through ``ctypes``). Where ``/proc`` is
missing (macOS), the claim is not checked this way.
"""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minidist.labkit.remote import on_student, process_of

# glibc's allocator: (mmap threshold, trim threshold) in bytes, while measuring and after
SEPARATE, AFTER = (128 * 1024, 128 * 1024), (32 * 2 ** 20, 64 * 2 ** 20)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters


def memory_returned(_: Any = None) -> None:
    """Probe: free what only cycles keep (``gc.collect``), then give the free memory of this
    process's heap back to the system (glibc's ``malloc_trim``; not elsewhere)."""
    gc.collect()
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


def allocator_for_measuring(_: Any, measuring: bool) -> None:
    """Probe: ``measuring``: every block of ``SEPARATE`` bytes or more mapped on its own and
    given back when freed, then ``memory_returned``; else the settings glibc's own rule
    reaches for a program that freed a large block (``AFTER``), under which large
    temporaries are reused from the heap rather than mapped, zeroed and faulted in anew."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is not None:
        mmap, trim = SEPARATE if measuring else AFTER
        mallopt(_M_MMAP_THRESHOLD, mmap)
        mallopt(_M_TRIM_THRESHOLD, trim)
    if measuring:
        memory_returned()


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None)


@dataclass
class Growth:
    """What ``peak_growth`` measured, above where the resident set stood when it began:
    ``bytes`` at its highest, ``kept`` at the end (None where it cannot be read)."""

    bytes: int | None = None
    kept: int | None = None


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # the file says kB
    raise OSError(f"/proc/{pid}/status has no {field}")


def readable(pid: int | None) -> bool:
    """Whether this process can reset and read ``pid``'s peak resident memory."""
    return pid is not None and os.access(f"/proc/{pid}/clear_refs", os.W_OK)


@contextmanager
def memory_of(obj: Any) -> Iterator[Growth]:
    """``peak_growth`` of the process ``obj`` lives in, with its allocator set for measuring
    (``allocator_for_measuring``) and its free memory given back before the memory is read."""
    on_student(allocator_for_measuring, obj, True)
    try:
        with peak_growth(process_of(obj)) as grown:
            yield grown
            on_student(memory_returned, obj)
    finally:
        on_student(allocator_for_measuring, obj, False)


@contextmanager
def peak_growth(pid: int | None) -> Iterator[Growth]:
    """How far process ``pid``'s resident memory rose above where it stood when the block
    began, at its highest and at the block's end: the peak is reset, then read."""
    growth = Growth()
    if not readable(pid):
        yield growth
        return
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak (VmHWM) := now (VmRSS)
    start = _status(pid, "VmRSS")
    yield growth
    now = _status(pid, "VmRSS")
    growth.kept = now - start
    growth.bytes = max(_status(pid, "VmHWM"), now) - start  # the peak is updated lazily
