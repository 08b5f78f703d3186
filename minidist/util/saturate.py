"""Run a command while every core is kept busy: a loaded machine, on purpose.

No test and no graded check may depend on how fast the machine is: what a
check needs to know about cost it reads from counters (messages, bytes,
rounds) or from the in-process transport's modelled clock, which are exact;
real timings belong to benchmarks and explore cells. This tool proves it::

    python -m minidist.util.saturate -- python -m pytest -q       # make test-loaded
    python -m minidist.util.saturate --per-core 2 -- python -m pytest -q tests/test_lab02.py

1. start ``per_core`` busy loops per core, each its own Python process at the
   priority of this one (no ``nice``: they compete with the command as other
   people's work would), each in a session of its own: Linux's autogroup
   scheduler shares the CPU between sessions first, so loops sharing one
   session would weigh together as little as one MPI job (which ``launch``
   starts in a session of its own) or one graded notebook;
2. run the command, with this terminal, and wait for it;
3. stop the busy loops (:func:`~minidist.util.processes.stop_process_tree`),
   whatever happened: the command's end, Ctrl-C, SIGTERM. A busy loop whose
   parent is gone (this tool killed with SIGKILL) ends by itself: it checks
   its parent between short bursts of work.

The exit code is the command's (128 + N when signal N ended it, as a shell
says; 127 when it cannot be started).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from minidist.util.processes import stop_process_tree

# A busy loop that ends once its parent (this tool) is gone: its parent pid then changes.
BUSY_LOOP = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextmanager
def saturated(per_core: int = 1) -> Iterator[list[subprocess.Popen]]:
    """While it lasts, ``per_core`` busy processes per core run; yields them, then stops them."""
    if per_core < 1:
        raise ValueError(f"per_core must be at least 1, got {per_core}")
    loads: list[subprocess.Popen] = []
    try:
        for _ in range(per_core * cores()):
            loads.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(os.getpid())],
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        yield loads
    finally:
        stop_process_tree(*loads)


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the ``finally`` blocks that clean up


def run_saturated(command: Sequence[str], per_core: int = 1) -> int:
    """Run ``command`` while the cores are kept busy; returns its exit code."""
    if not command:
        raise ValueError("no command to run: saturate -- COMMAND [ARGS...]")
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        with saturated(per_core) as loads:
            print(f"saturate: {len(loads)} busy processes on {cores()} cores while running: "
                  f"{' '.join(command)}", file=sys.stderr, flush=True)
            try:
                child = subprocess.Popen(list(command))
            except OSError as error:
                print(f"saturate: cannot run {command[0]!r}: {error}", file=sys.stderr)
                return 127
            try:
                code = child.wait()
            except BaseException:  # Ctrl-C or SIGTERM: the command goes too
                stop_process_tree(child)
                raise
        return 128 - code if code < 0 else code
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minidist.util.saturate",
        description="Run COMMAND while every core is kept busy by busy loops at the same "
                    "priority; stop them afterwards. Exits with COMMAND's exit code.")
    parser.add_argument("--per-core", type=int, default=1, metavar="K",
                        help="busy processes per core (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command, after --: -- python -m pytest -q")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: python -m minidist.util.saturate -- COMMAND [ARGS...]")
    if args.per_core < 1:
        parser.error(f"--per-core must be at least 1, got {args.per_core}")
    try:
        return run_saturated(command, args.per_core)
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
