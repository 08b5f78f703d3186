"""Seeing the messages: ``MINIDIST_TRACE=1`` prints one line per message.

With the variable set, every point-to-point message a rank sends is
printed to stderr, flushed, as::

    rank 0 -> 1 | tag 7 | 800 bytes

Ranks are world ranks (which process talks to which), whatever
communicator the message went through. Reading the trace of a four-rank
ring allreduce is the quickest way to see its 2(P-1) steps. Both transports
print the same line, the in-process one from each rank's thread.
"""

from __future__ import annotations

import os
import sys
import threading

_print_lock = threading.Lock()


def trace_enabled() -> bool:
    """True when ``MINIDIST_TRACE`` is set to anything but ``""``/``"0"``."""
    return os.environ.get("MINIDIST_TRACE", "") not in ("", "0")


def trace_message(source: int, dest: int, tag: int, nbytes: int) -> None:
    """Print the trace line of one message (one write, so lines never mix)."""
    line = f"rank {source} -> {dest} | tag {tag} | {nbytes} bytes\n"
    with _print_lock:
        sys.stderr.write(line)
        sys.stderr.flush()
