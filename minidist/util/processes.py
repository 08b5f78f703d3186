"""Ending a process and everything it started: the one way minidist stops processes.

``launch`` stops an MPI job (mpiexec, its proxies, the ranks), Hogwild stops
its workers, the grader stops a student's nbgrader run. Each asks the same
thing, so each calls :func:`stop_process_tree`:

1. note every descendant of each root (psutil walks the process tree), since
   a child whose parent dies is adopted by init and can no longer be found;
2. SIGTERM the roots and their descendants, the process group of a root
   that leads a group of its own (``start_new_session=True``): a process that
   double-forked out of the tree is still in the group; and, given a ``mark``
   (``NAME=VALUE`` set in the roots' environment), every process whose
   environment holds it: one that left the group too (``setsid``, as MPICH's
   hydra does for each rank) and whose parent died before it could be noted;
3. wait up to ``grace`` seconds for all of them to end (a rank flushes its
   output, a worker closes its shared memory);
4. SIGKILL whatever is left, the same way (twice: a process started by a
   parent that only SIGKILL ended is found by the second), and reap the roots.

A root is a ``subprocess.Popen`` or a ``multiprocessing.Process``, and is
waited for through that object, so its ``returncode``/``exitcode`` stays right.

An MPI job's ranks may outlive their parents by an instant, as orphans:
:func:`adopting_orphans` makes this process their parent while a job runs,
and reaps that job's own (never another's running beside it).

Whoever stops processes in a ``finally`` clause runs them inside
:func:`terminated_like_interrupted`: SIGTERM (what ``timeout``, Slurm and
Kubernetes send) then ends this process as Ctrl-C does, by an exception, so
that the clause runs; by default it would end at once, and leave them running.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psutil

KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL


class _Root:
    """A root process, signalled and waited for through its own object."""

    def __init__(self, process: subprocess.Popen | Any):
        self.process, self.pid = process, process.pid

    def alive(self) -> bool:
        if isinstance(self.process, subprocess.Popen):
            return self.process.poll() is None
        return self.process.exitcode is None  # multiprocessing.Process: polls and reaps

    def signal(self, sig: int) -> None:
        if self.alive():
            with suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def reap(self) -> None:
        if isinstance(self.process, subprocess.Popen):
            self.process.wait()
        else:
            self.process.join()

    def leads_own_group(self) -> bool:
        """Whether a process group numbered by this pid exists (it outlives its leader, and
        the kernel hands out no pid still in use as a group's number)."""
        if self.pid == os.getpgrp():
            return False
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # members of another user (the grader's sandbox uid)
            pass
        return True


def _running(process: psutil.Process) -> bool:
    """Still there and not a zombie (a zombie has ended; only its parent's wait is due)."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _descendants(tops: list[_Root]) -> dict[int, psutil.Process]:
    found = {}
    for top in tops:
        with suppress(psutil.NoSuchProcess):
            found.update((p.pid, p) for p in psutil.Process(top.pid).children(recursive=True))
    return found


def _group_alive(pgid: int) -> bool:
    """Whether the process group ``pgid`` still holds a process that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, with members of another user
    for process in psutil.process_iter():
        with suppress(ProcessLookupError, psutil.NoSuchProcess):
            if os.getpgid(process.pid) == pgid and _running(process):
                return True
    return False


def _marked(mark: str | None) -> dict[int, psutil.Process]:
    """The processes, other than this one, whose environment holds ``mark`` (NAME=VALUE)."""
    if mark is None:
        return {}
    name, _, value = mark.partition("=")
    found = {}
    for process in psutil.process_iter():
        with suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            if process.pid != os.getpid() and process.environ().get(name) == value:
                found[process.pid] = process
    return found


def stop_process_tree(*roots: Any, grace: float = KILL_GRACE, mark: str | None = None) -> None:
    """End each root and every process it started: SIGTERM, ``grace`` seconds, SIGKILL.

    Returns once the roots are reaped and the rest is gone (or, for a process
    that even SIGKILL cannot end at once, after two more ``grace`` periods).
    """
    tops = [_Root(p) for p in roots if p.pid is not None]  # None: a Process never started
    groups = [top.pid for top in tops if top.leads_own_group()]
    family: dict[int, psutil.Process] = {}

    def anything_left() -> bool:
        return (any(top.alive() for top in tops) or any(map(_running, family.values()))
                or any(map(_group_alive, groups)))

    for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGKILL):
        family.update(_descendants(tops))                         # 1. the whole tree, now,
        family.update(_marked(mark))                              # and the marked
        for top in tops:                                          # 2. / 4. signal it
            top.signal(sig)
        for pgid in groups:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        for process in family.values():
            with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                process.send_signal(sig)
        deadline = time.monotonic() + grace                       # 3. wait for it
        while anything_left() and time.monotonic() < deadline:
            time.sleep(0.02)
        family.update(_marked(mark))  # read once a stage (each read opens every process's
        if not anything_left():       # environment): one started meanwhile is still caught
            break
    for top in tops:
        top.reap()


@contextmanager
def terminated_like_interrupted() -> Iterator[None]:
    """Inside, SIGTERM raises ``SystemExit(143)`` in the main thread, as SIGINT raises
    KeyboardInterrupt, so ``finally`` clauses run. Off the main thread, or where a
    SIGTERM handler is already set, nothing changes (Python sets handlers there only)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def leave(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)



# --- orphans: an MPI job's ranks outlive their parents by an instant -------------------------

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36  # linux/prctl.h
_subreaper_users, _subreaper_lock = 0, threading.Lock()
_running_jobs: list[set[int]] = []  # the processes each job running now knows (its mpiexec)


def prctl(option: int, value: int) -> bool:
    """Linux's ``prctl(option, value)`` for this process; False where it cannot be
    (another system, or the call failed)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _set_subreaper(on: bool) -> bool:
    return prctl(PR_SET_CHILD_SUBREAPER, int(on))  # elsewhere init reaps orphans


@contextmanager
def adopting_orphans(mark: str) -> Iterator[set[int]]:
    """Inside, orphans of the processes this one starts become its children (Linux's
    child subreaper); on the way out it reaps those of the job whose processes carry
    ``mark`` (NAME=VALUE in their environment): the children it did not have before,
    nor any job running beside it adds to its yielded set (a Popen reaps its own), in a
    session other than its own (as are all of an MPI job's), dead already (zombies) or
    marked. Another job's, or a process the caller started in a session of its own,
    are left alone (once, a job that ended first killed the mpiexec of one beside it)."""
    global _subreaper_users
    me, (name, _, value) = psutil.Process(), mark.partition("=")
    known = {child.pid for child in me.children()}
    with _subreaper_lock:
        _subreaper_users += 1
        adopting = _set_subreaper(True)
        _running_jobs.append(known)
    try:
        yield known
    finally:
        with _subreaper_lock:
            _running_jobs.remove(known)
            others = set().union(*_running_jobs)
        for child in me.children() if adopting else []:
            with suppress(psutil.Error, ProcessLookupError, ChildProcessError, PermissionError):
                if child.pid in known or child.pid in others or \
                        os.getsid(child.pid) == os.getsid(0):
                    continue
                if child.status() == psutil.STATUS_ZOMBIE or \
                        child.environ().get(name) == value:
                    os.kill(child.pid, signal.SIGKILL)  # stopped with the job already
                    os.waitpid(child.pid, 0)
        with _subreaper_lock:
            _subreaper_users -= 1
            if _subreaper_users == 0:
                _set_subreaper(False)
