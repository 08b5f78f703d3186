"""An MPI job that ends cleanly when a rank dies, and says which rank it was.

    minidist mpirun -n 4 -m minidist.examples.mlp_ddp --epochs 5     # or python -m minidist.cli
    minidist mpirun -n 4 [-f HOSTFILE] [--grace SECONDS] script.py ARGS...

runs what ``mpiexec -n 4 python -m mpi4py ...`` runs (the command of
:mod:`minidist.util.mpiexec`), and ``launch(..., backend="mpi")`` runs its jobs
the same way. When a rank's process is killed (SIGKILL from a user or the
out-of-memory killer, a segmentation fault), the whole job ends, within a
stated time, with one line naming the rank, and leaves no process:

1. **The rank is named by its guard.** Each rank runs under ``RANK_GUARD``
   (``rank_guard.py``), a few lines of POSIX sh that start the rank and wait
   for it. If the rank ends by a signal, the guard writes ``minidist: rank 1
   (pid 4242 on host) was killed by signal 9`` on stderr and dies by the same
   signal. Nothing else can say it: the rank itself is gone, and MPICH's
   ``BAD TERMINATION ... PID`` banner names whichever process its clean-up
   saw end first, often a rank it killed itself, and never a rank number. The
   rank is ``PMI_RANK`` (MPICH) or ``OMPI_COMM_WORLD_RANK`` (Open MPI); this
   side reads the line as a :class:`Death` ("rank 1 ... was killed by
   SIGKILL").
2. **mpiexec ends the job.** When a process of the job ends abnormally,
   MPICH's hydra kills every other rank's process group (a guard and its
   rank are one group, so they end together, and only the dead rank's guard
   speaks). If it has not ended :data:`DEATH_GRACE` seconds after the
   guard's line, the job is stopped here; so too after a guard's line that
   its rank exited with an error status (``os._exit(3)``, a failed assertion
   in C), which hydra leaves, now and then, to hang the ranks that wait for it.
3. **Nothing is left.** Whatever happened (the end, a death, a timeout, an
   interrupt), mpiexec, started in a session of its own, is stopped with
   every process it started (:func:`~minidist.util.processes.stop_process_tree`:
   SIGTERM, then SIGKILL after ``KILL_GRACE`` seconds), and with it every
   process whose environment holds the job's :data:`JOB_MARK`: hydra puts
   each rank in a session of its own, so a rank whose proxy died before it
   could be noted (a job aborted while it started) is found by its mark,
   not by its place in the tree. One more step, because
   a guard and its rank die together: the rank outlives its parent by an
   instant and, an orphan, waits (a zombie) until init reaps it, which can
   take a second. On Linux this process therefore adopts the job's orphans
   while it runs (a *child subreaper*, ``prctl(PR_SET_CHILD_SUBREAPER)``) and
   reaps them itself (``util.processes.adopting_orphans``).

So a job ends at most ``DEATH_GRACE + KILL_GRACE`` seconds after a rank
dies; hydra usually ends it within a few hundredths of a second (README,
"When a rank dies"). The command exits with the status the first guard's
line names: 128 + the signal's number after a rank's death (137 for SIGKILL),
3 after ``os._exit(3)``. Not mpiexec's: hydra ORs the wait statuses of all
the ranks, those it killed itself included (3 << 8 | 9 reads as "killed by
signal 9": exit status 9). With no guard's line, it exits with 141
(SIGPIPE's) when its own output was closed (``| head``: the job is stopped,
as a pipe's writer would be), else with mpiexec's status.
"""

from __future__ import annotations

import codecs
import itertools
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from minidist.comm.transport.rank_guard import DEATH_LINE, FAILED_LINE, GUARD_COMMAND, Death
from minidist.util.mpiexec import mpiexec_command, rank_environment
from minidist.util.processes import (
    KILL_GRACE,
    adopting_orphans,
    stop_process_tree,
    terminated_like_interrupted,
)
from minidist.util.shm import remove_left_segments

DEATH_GRACE = 5.0  # seconds mpiexec is given to end the job after a rank's death
JOB_MARK = "MINIDIST_JOB"  # in the environment of every process of a job: its identity
_jobs = itertools.count()


@dataclass
class JobEnd:
    """How a job ended: mpiexec's status (None if it was stopped), the deaths its guards
    reported (the first is the cause), whether ``timeout`` ran out, when it ended, and
    the exit status the first guard's line named (128 + signal for a death; None if no
    guard spoke)."""

    returncode: int | None
    deaths: list[Death]
    timed_out: bool
    ended: float
    stderr_tail: list[str]
    first_failure: int | None


def guarded_command(ranks: int, program: Sequence[str], hostfile: str | os.PathLike | None = None,
                    mpiexec_args: Sequence[str] = ()) -> list[str]:
    """``mpiexec ... -n ranks sh -c RANK_GUARD sh python -m mpi4py PROGRAM...``."""
    return mpiexec_command(ranks, program, hostfile, mpiexec_args, wrapper=GUARD_COMMAND)


def run_job(command: Sequence[str], env: dict[str, str], timeout: float | None = None,
            grace: float = DEATH_GRACE) -> JobEnd:
    """Run an MPI job, relaying its output here, until it ends, a rank has been dead for
    ``grace`` seconds, or ``timeout`` seconds have passed; then stop all of it."""
    job_id = f"{os.getpid()}-{next(_jobs)}"  # 3. every process of this job carries it
    started = time.time()
    with terminated_like_interrupted(), adopting_orphans(f"{JOB_MARK}={job_id}") as known:
        try:
            job = subprocess.Popen(command, env={**env, JOB_MARK: job_id},
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True)
            known.add(job.pid)  # not an orphan: the Popen reaps it
            return _follow(job, timeout, grace, f"{JOB_MARK}={job_id}")
        finally:
            remove_left_segments(started)  # MPICH's shared memory, if the job did not end well


def _follow(job: subprocess.Popen, timeout: float | None, grace: float, mark: str) -> JobEnd:
    deaths: list[Death] = []
    failed: list[tuple[float, int]] = []  # when a guard said its rank failed; the status named
    tail: list[str] = []
    news = threading.Event()  # the job ended, or a guard reported a death
    closed = threading.Event()  # our own output was closed (a pipe into `head`)
    helpers = [threading.Thread(target=_relay,
                                args=(job.stdout, sys.stdout, None, None, news, closed)),
               threading.Thread(target=_relay,
                                args=(job.stderr, sys.stderr, tail, (deaths, failed), news,
                                      closed)),
               threading.Thread(target=lambda: (job.wait(), news.set()))]
    for helper in helpers:
        helper.daemon = True
        helper.start()
    deadline = math.inf if timeout is None else time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            news.clear()
            if job.poll() is not None or closed.is_set():
                break
            limit = min(deadline, failed[0][0] + grace) if failed else deadline
            if time.monotonic() >= limit:
                timed_out = not failed
                break
            news.wait(None if limit == math.inf else limit - time.monotonic())
    finally:
        stop_process_tree(job, mark=mark)  # 3. nothing outlives the job, whatever happened
        ended = time.monotonic()
        for helper in helpers:
            helper.join(KILL_GRACE)
    returncode = -signal.SIGPIPE if closed.is_set() else job.returncode
    return JobEnd(returncode if not timed_out else None, deaths, timed_out, ended, tail,
                  failed[0][1] if failed else None)


def _relay(pipe: Any, stream: Any, tail: list[str] | None,
           ends: tuple[list[Death], list[tuple[float, int]]] | None, news: threading.Event,
           closed: threading.Event) -> None:
    """Copy ``pipe`` to ``stream`` as it comes (progress bars included); keep the last
    lines in ``tail``; note each guard's death line in ``ends[0]``, and when any guard
    said its rank was killed or exited with an error, with the exit status its line
    names (128 + signal for a death), in ``ends[1]``. If ``stream`` was
    closed (``| head``), set ``closed`` and go on reading, so no rank blocks on a write:
    the job is then stopped, as a pipe's writer is by SIGPIPE."""
    decoder, line = codecs.getincrementaldecoder("utf-8")(errors="replace"), ""
    for chunk in iter(lambda: pipe.read1(1 << 16), b""):
        text = decoder.decode(chunk)
        if not closed.is_set():
            try:
                stream.write(text)
                stream.flush()
            except (BrokenPipeError, ValueError):  # ValueError: a closed file object
                closed.set()
                news.set()
        *complete, line = (line + text).split("\n")
        for finished in complete:
            if tail is not None:
                tail[:] = [*tail[-19:], finished + "\n"]
            failure = FAILED_LINE.search(finished) if ends is not None else None
            if not failure:
                continue
            found = DEATH_LINE.search(finished)
            if found:
                rank, pid, host, number = found.groups()
                ends[0].append(Death(int(rank), int(pid), host, int(number)))
            killed, number = failure.group(1).startswith("was"), int(failure.group(2))
            ends[1].append((time.monotonic(), 128 + number if killed else number))
            news.set()
    pipe.close()


USAGE = ("usage: minidist mpirun -n RANKS [-f HOSTFILE] [--grace SECONDS] "
         "(-m MODULE | SCRIPT) ARGS...")
HELP = f"""{USAGE}

Run PROGRAM on RANKS ranks, as mpiexec -n RANKS python -m mpi4py PROGRAM would,
each rank under a guard: a rank killed by a signal, or exiting with an error,
ends the whole job at once, and one line names it.

  -n RANKS         ranks to start (at least 1)
  -f HOSTFILE      hosts to start them on, a line each (MPICH: HOST[:SLOTS];
                   Open MPI: HOST [slots=SLOTS])
  --grace SECONDS  how long the other ranks may take to end after one failed,
                   before they are stopped (default {DEATH_GRACE:g})

Exit status: that of the first rank that failed (128 + the signal after a
kill), else mpiexec's; 2 for a usage error."""


def main(argv: Sequence[str] | None = None) -> int:
    """``-n RANKS [-f HOSTFILE] [--grace SECONDS] (-m MODULE | SCRIPT) ARGS...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(HELP)
        return 0
    options: dict[str, str] = {}
    while argv and argv[0] in ("-n", "-f", "--grace") and len(argv) >= 2:
        options[argv[0]] = argv[1]
        argv = argv[2:]
    grace = options.get("--grace", str(DEATH_GRACE))
    wrong = ("-n RANKS is required" if "-n" not in options else
             f"-n takes a number of ranks >= 1, not {options['-n']!r}"
             if not options["-n"].isdigit() or int(options["-n"]) < 1 else
             f"--grace takes seconds, not {grace!r}" if not grace.replace(".", "", 1).isdigit()
             else "no program to run (-m MODULE or SCRIPT)" if not argv else None)
    if wrong:
        print(f"{USAGE}\nminidist mpirun: {wrong}", file=sys.stderr)
        return 2
    ranks = int(options["-n"])
    try:
        command = guarded_command(ranks, argv, options.get("-f"))
    except ValueError as err:  # a hostfile mpiexec would misread (util.mpiexec.check_hostfile)
        print(f"minidist mpirun: {err}", file=sys.stderr)
        return 2
    try:
        end = run_job(command, rank_environment(ranks), grace=float(grace))
    except KeyboardInterrupt:  # the job is stopped already
        return 130
    if end.deaths:
        first = end.deaths[0]
        print(f"mpirun: {first}; the job ended {end.ended - first.seen:.2f} s later",
              file=sys.stderr)
    if end.returncode == -signal.SIGPIPE:  # our output closed: nothing more can be said
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if end.first_failure is not None:  # the guard's line named it: hydra's status may not
        return end.first_failure
    if end.returncode is not None and end.returncode < 0:  # mpiexec stopped here, by a signal
        return 128 - end.returncode
    return end.returncode or 0

