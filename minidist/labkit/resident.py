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
code touched, whatever it reports. Two things keep the count honest for an
honest answer too:

* ``large_blocks_returned()`` (called by the probe, in the process that
  allocates) fixes the C allocator's threshold, so that every array of 128 KiB
  or more is mapped when made and given back when freed: a freed array's
  memory is not kept and reused unseen, nor kept and counted again;
* the sizes are chosen so that what the claim is about (megabytes of
  activations, of optimiser state) dwarfs what the interpreter itself
  allocates.

What it does not see: memory the code keeps outside the process (a file it
writes and reads back); memory it reserves and never writes (``np.zeros``
costs a page only once the page is written); and memory reused from the
process's own free heap after the code changes the allocator's settings
itself (``ctypes``). Where ``/proc`` is missing (macOS), the claim is not
checked this way.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MMAP_THRESHOLD = 128 * 1024  # bytes: arrays this large are mapped on their own
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def large_blocks_returned() -> None:
    """Ask glibc's allocator to map every block of ``MMAP_THRESHOLD`` bytes or more on its own
    and to give free memory back at once (no effect where the C library is not glibc)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, MMAP_THRESHOLD)


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
    growth.bytes = _status(pid, "VmHWM") - start
    growth.kept = _status(pid, "VmRSS") - start
