"""nbgrader runs forked from a process that has already imported it.

Grading a class starts one ``nbgrader autograde`` a student. Each must be a
process of its own (the grader stops it and everything it started, and a
timeout kills it), but most of its start is importing nbgrader, nbconvert,
jupyter_client and SQLAlchemy: about 2 s a student, the same every time. So a
grader keeps one **fork server** (``python -m minidist.course.nbgrader_fork``)
that imports them once (``nbgrader_preload.py``) and then forks a run for each
request:

1. the grader writes a request, one JSON line on the server's stdin: the
   run's id, nbgrader's arguments, working directory, environment and log;
2. the server forks; the child takes a process group of its own (set by both
   sides, so the grader can signal it as soon as it hears of it), sends its
   output to the log, takes the run's folder and environment in place of the
   server's, runs nbgrader's command line, and ends with its exit status,
   without the interpreter's teardown;
3. the server answers ``ID started PID`` at once and ``ID ended STATUS`` when
   the child ends (it waits on each child's pidfd), one line each on its stdout.

The server imports but never runs a notebook or opens a gradebook, so every
run starts from the same state; the kernel that runs student code is started
by the run, through ``sandbox.py``, as before. A run looks to the grader like a
``multiprocessing.Process`` (``pid``, ``join``, ``exitcode``), so
:func:`minidist.util.processes.stop_process_tree` stops it like one.
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import subprocess
import sys
import threading
import traceback
from contextlib import suppress
from pathlib import Path


def _run_nbgrader(request: dict) -> None:
    """The forked child (step 2); never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the server's pidfds and selector
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from nbgrader.apps.nbgraderapp import NbGraderApp  # preloaded: no import

        sys.argv = ["nbgrader", *request["argv"]]
        NbGraderApp.launch_instance(argv=request["argv"])
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001  (into the run's log, as an uncaught error would go)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def serve() -> None:
    """The fork server's loop (steps 1-3), until the grader closes its stdin."""
    import minidist.course.nbgrader_preload  # noqa: F401  (imported once, for every run)

    selector, pending, children = selectors.DefaultSelector(), b"", {}
    selector.register(0, selectors.EVENT_READ)

    def answer(line: str) -> None:
        os.write(1, (line + "\n").encode())

    while True:
        for key, _ in selector.select():
            if key.fd == 0:
                chunk = os.read(0, 65536)
                if not chunk:
                    return
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        _run_nbgrader(request)
                    with suppress(ProcessLookupError, PermissionError):  # ended already
                        os.setpgid(pid, pid)  # also here: no window in which it has none
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = (request["id"], pid)
                    selector.register(pidfd, selectors.EVENT_READ)
                    answer(f"{request['id']} started {pid}")
            else:
                run, pid = children.pop(key.fd)
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                answer(f"{run} ended {os.waitstatus_to_exitcode(status)}")


class Run:
    """One forked nbgrader run, as the grader sees it: ``pid``, ``join``, ``exitcode``."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.exitcode: int | None = None
        self._started, self._ended = threading.Event(), threading.Event()

    def join(self, timeout: float | None = None) -> None:
        self._ended.wait(timeout)


class ForkServer:
    """A grader's fork server: started on the first run, stopped by ``close``."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | None = None
        self._runs: dict[int, Run] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def start(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> Run:
        """Start ``nbgrader ARGV`` in ``cwd`` with ``env``, its output appended to ``log``."""
        run = Run()
        with self._lock:
            self._ensure_server()
            number = next(self._ids)
            self._runs[number] = run
            request = dict(id=number, argv=argv, cwd=str(cwd), env=env, log=str(log))
            assert self._server is not None and self._server.stdin is not None
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
        run._started.wait()
        if run.pid is None:
            raise RuntimeError("the nbgrader fork server ended before it started the run")
        return run

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.stdin.close()
                self._server.wait()
                self._server = None

    def _ensure_server(self) -> None:
        if self._server is not None and self._server.poll() is None:
            return
        self._server = subprocess.Popen(
            [sys.executable, "-m", "minidist.course.nbgrader_fork"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, bufsize=1)
        self._runs = {}  # this server's runs: a dead one's listener must not end the next's
        threading.Thread(target=self._listen, args=(self._server, self._runs),
                         daemon=True).start()

    @staticmethod
    def _listen(server: subprocess.Popen, runs: dict[int, Run]) -> None:
        for line in server.stdout:
            number, what, value = line.split()
            run = runs[int(number)]
            if what == "started":
                run.pid = int(value)
                run._started.set()
            else:
                run.exitcode = int(value)
                del runs[int(number)]
                run._ended.set()
        for run in list(runs.values()):  # the server died: none of its runs can report
            run.exitcode = -9
            run._started.set()
            run._ended.set()


if __name__ == "__main__":
    serve()
