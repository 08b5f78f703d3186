"""The grader's line to a student's kernel: one request in, one reply of data out.

``KernelChannel`` is the ``channel`` of a ``labkit.remote.Session``. For
each check cell it opens a line to the kernel: a unix socket it listens on
in the kernel's working directory, which the kernel joins from a cell of its
own (``labkit.serve.serve_line``) and serves until the check ends. Each
request is one message on the line, and so is its reply: JSON text, parsed
by ``labkit.wire`` as data. A message on the line is one write and one
read, where a Jupyter message passes through the kernel's shell and event
loop, and a multi-rank check sends hundreds (grading/README.md has the
figures). Whatever the kernel printed while it served
the check is copied, as text, to the check's output once the check ends (so
a student's ``print`` shows in the feedback; it cannot add an error or a
score to the graded cell). Only the kernel's own process may join the line
(its pid, from the socket's credentials).

Every wait has the cell's deadline: past it, the line is dropped, the kernel
interrupted and ``CellTimeout`` raised (and every later request of the cell
raises it at once); a kernel that is no longer alive raises
``KernelDied``. Both are BaseExceptions, so no ``task`` turns them into a
check's failure sentence: the executor records them and goes on.

A multi-rank check calls the kernel from the ranks of an in-process run,
which take turns on a thread of their own (``comm.LocalCluster``), so a
request may come from any thread: it uses the client's sockets directly
(never an event loop of the thread that made them), and one request at a
time holds the channel.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from jupyter_client import BlockingKernelClient
from jupyter_core.utils import run_sync

from minidist.labkit import wire

MAX_PRINTED = 100_000  # characters of a check cell's printed output kept
SERVE = "__import__('minidist.labkit.serve', fromlist=['serve_line']).serve_line({path!r})"
ACCEPT_SLICE_S = 0.02  # how often the grader looks whether the serving cell ended instead


class CellTimeout(BaseException):
    """The cell's deadline passed while the kernel worked on a request."""


class KernelDied(BaseException):
    """The kernel stopped (exited, was killed, or hit its memory limit)."""


class NoReply(Exception):
    """The kernel ended a request without a reply (the notebook broke ``serve``)."""


NO_REPLY = ("the notebook's kernel gave no answer to the check (did the notebook replace "
            "minidist.labkit?)")


def is_idle(msg: dict, msg_id: str) -> bool:
    """Whether ``msg`` says the kernel is idle again after the cell ``msg_id``."""
    return (msg.get("parent_header", {}).get("msg_id") == msg_id and msg["msg_type"] == "status"
            and msg["content"].get("execution_state") == "idle")


class KernelChannel:
    """Requests to the kernel of ``executor`` (an nbclient ``NotebookClient``)."""

    def __init__(self, executor: Any):
        self.executor = executor
        self.client: BlockingKernelClient | None = None
        self.deadline = float("inf")
        self._lock = threading.Lock()
        self._line: socket.socket | None = None  # this check cell's line, once opened
        self.serving = ""  # the id of the kernel's cell that serves it ("" before one)

    def connect(self) -> None:
        if self.client is not None:
            self.client.stop_channels()
        self._drop_line()
        self.client = BlockingKernelClient()
        self.client.load_connection_info(self.executor.km.get_connection_info())
        self.client.start_channels()
        self.client.wait_for_ready(timeout=self.executor.startup_timeout)

    @property
    def pid(self) -> int | None:
        """The kernel's process id (the sandbox becomes the kernel in the same process)."""
        process = getattr(self.executor.km.provisioner, "process", None)
        return getattr(process, "pid", None)

    def start_cell(self, deadline: float) -> None:
        self.deadline, self.serving = deadline, ""

    def _manage(self, method: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run one of the kernel manager's coroutine methods from this thread."""
        if threading.current_thread() is threading.main_thread():
            return run_sync(method)()
        return asyncio.run(method())  # a ranks' thread: a loop of its own, closed after

    def _alive(self) -> bool:
        return bool(self._manage(self.executor.km.is_alive))

    @contextmanager
    def _holding(self) -> Iterator[None]:
        """The channel, for one request at a time, within the cell's deadline."""
        left = self.deadline - time.monotonic()
        if left <= 0 or not self._lock.acquire(timeout=-1 if left == float("inf") else left):
            raise CellTimeout
        try:
            yield
        finally:
            self._lock.release()

    # --- cells: Jupyter's messages -----------------------------------------------------------
    def _execute(self, code: str, printed: bool = False) -> None:
        """Run ``code`` as a cell, until the kernel is idle again."""
        with self._holding():
            self._until_idle(self._start(code), printed)

    def _start(self, code: str) -> str:
        """Send ``code`` as a cell to run; its message id."""
        if self.client is None:
            self.connect()
        iopub = self.client.iopub_channel
        while iopub.msg_ready():  # what the notebook's own cells published
            iopub.get_msg(timeout=0)
        message = self.client.session.msg("execute_request", {
            "code": code, "silent": False, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": False})
        self.client.shell_channel.send(message)
        return message["header"]["msg_id"]

    def _until_idle(self, msg_id: str, printed: bool) -> None:
        """Wait until the cell ``msg_id`` has run, copying what it printed when ``printed``."""
        iopub, copied, checked = self.client.iopub_channel, 0, time.monotonic()
        while True:
            if time.monotonic() > self.deadline:
                self._interrupt(msg_id)
                raise CellTimeout
            try:
                msg = iopub.get_msg(timeout=0.2)
            except queue.Empty:
                if time.monotonic() - checked > 1.0:
                    checked = time.monotonic()
                    if not self._alive():
                        raise KernelDied from None
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and printed and copied < MAX_PRINTED:
                text = str(content.get("text", ""))[:MAX_PRINTED - copied]
                sys.stdout.write(text)
                copied += len(text)
            elif kind == "status" and content.get("execution_state") == "idle":
                break
        while self.client.shell_channel.msg_ready():
            self.client.shell_channel.get_msg(timeout=0)

    def _ended(self, msg_id: str) -> bool:
        """Whether the cell ``msg_id`` has already run (its idle status came), unwaited."""
        iopub = self.client.iopub_channel
        while iopub.msg_ready():
            msg = iopub.get_msg(timeout=0)
            if is_idle(msg, msg_id):
                return True
        return False

    def _interrupt(self, msg_id: str) -> None:
        """Interrupt the cell; wait a little for the kernel to be idle again."""
        self._manage(self.executor.km.interrupt_kernel)
        until = time.monotonic() + 5
        try:
            while True:
                msg = self.client.iopub_channel.get_msg(timeout=max(0.0, until - time.monotonic()))
                if is_idle(msg, msg_id):
                    return
        except queue.Empty:
            pass

    # --- requests: the line -------------------------------------------------------------------
    def __call__(self, text: str) -> str:
        with self._holding():
            if self._line is None:
                self._open_line()
            try:
                self._line.settimeout(max(1e-3, self.deadline - time.monotonic()))
                wire.send_text(self._line, text)
                reply = wire.recv_text(self._line)
            except TimeoutError:
                self._drop_line()  # the kernel's loop ends once its request does
                self._interrupt(self.serving)
                raise CellTimeout from None
            except OSError:
                reply = None
            if reply is None:  # the line closed: the kernel died, or its loop ended
                self._drop_line()
                if not self._alive():
                    raise KernelDied
                raise NoReply(NO_REPLY)
            return reply

    def _open_line(self) -> None:
        """Listen on a new socket in the kernel's folder, have a cell of the kernel join it
        (``serve_line``), and keep the kernel's connection as this cell's line."""
        sandbox = json.loads(os.environ.get("MINIDIST_SANDBOX", "null")) or {}
        folder = sandbox.get("workdir") or tempfile.gettempdir()
        path = os.path.join(folder, f".line-{uuid.uuid4().hex[:16]}")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            os.chmod(path, 0o666)  # the kernel's user joins; the folder is the kernel's own
            listener.listen(4)
            self.serving = self._start(SERVE.format(path=path))
            self._line = self._accept_the_kernel(listener)
        finally:
            listener.close()
            with suppress(OSError):
                os.unlink(path)

    def _accept_the_kernel(self, listener: socket.socket) -> socket.socket:
        kernel, checked = self.pid, time.monotonic()
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self._interrupt(self.serving)
                raise CellTimeout
            listener.settimeout(min(ACCEPT_SLICE_S, left))
            try:
                line, _ = listener.accept()
            except TimeoutError:
                if self._ended(self.serving):  # the cell ended without joining
                    raise NoReply(NO_REPLY) from None
                if time.monotonic() - checked > 1.0:
                    checked = time.monotonic()
                    if not self._alive():
                        raise KernelDied from None
                continue
            pid, _, _ = struct.unpack("3i", line.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            if kernel is None or pid == kernel:
                line.settimeout(None)
                return line
            line.close()  # another process of the student's: only the kernel may answer

    def _drop_line(self) -> None:
        if self._line is not None:
            with suppress(OSError):
                self._line.close()
            self._line = None

    def end_cell(self) -> None:
        """The check cell is over: the kernel's serving cell ends, and what it printed is
        copied to the check's output."""
        if self._line is None:
            return
        with self._holding():
            with suppress(OSError):
                wire.send_text(self._line, "")
            self._drop_line()
            self._until_idle(self.serving, printed=True)

    def reset(self) -> None:
        """Start a check cell: the kernel forgets the last cell's tensors and results."""
        self("{\"op\": \"reset\"}")

    def run_quietly(self, source: str) -> bool:
        """Run a cell again after a restart, its output dropped; False if it failed to end."""
        try:
            self._execute(source)
        except (CellTimeout, KernelDied):
            return False
        return True

    def responsive(self) -> bool:
        """Whether the kernel answers a trivial request within a few seconds."""
        self.deadline = time.monotonic() + 5
        try:
            self._execute("None")
        except (CellTimeout, KernelDied):
            return False
        return True
