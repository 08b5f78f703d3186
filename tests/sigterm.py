"""SIGTERM to a process that started others: wait until they run, signal it, and say which
of them outlived it (tests of ``util.processes.terminated_like_interrupted``'s callers)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import psutil


def survivors_of_sigterm(caller: subprocess.Popen, folder: Path, names: list[str]) -> list[int]:
    """Once each started process has written its pid to ``folder / name``, SIGTERM
    ``caller``; check it exits with 128 + SIGTERM, and return the started processes still
    running (not zombies)."""
    deadline = time.monotonic() + 60
    while not all((folder / name).exists() for name in names):
        assert time.monotonic() < deadline and caller.poll() is None, "they never started"
        time.sleep(0.1)
    time.sleep(0.3)  # each pid written whole
    started = [int((folder / name).read_text()) for name in names]
    caller.send_signal(signal.SIGTERM)
    assert caller.wait(timeout=30) == 128 + signal.SIGTERM
    return [pid for pid in started if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
