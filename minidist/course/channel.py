"""The grader's line to a student's kernel: one request in, one reply of data out.

``KernelChannel`` is the ``channel`` of a ``labkit.remote.Session``. It sends
a request over the kernel's own Jupyter connection as a comm message to
``minidist.labkit.serve`` (which a first cell, ``listen()``, sets up: a comm
message costs the kernel a fraction of a cell, and a multi-rank check sends
hundreds), and reads the reply the kernel sends back on that comm: JSON text,
parsed by ``labkit.wire`` as data. Whatever else the request printed is
copied, as text, to the check's output (so a student's ``print`` shows in
the feedback; it cannot add an error or a score to the graded cell).

Every wait has the cell's deadline: past it, the kernel is interrupted and
``CellTimeout`` raised (and every later request of the cell raises it at
once); a kernel that is no longer alive raises ``KernelDied``. Both are
BaseExceptions, so no ``task`` turns them into a check's failure sentence:
the executor records them and goes on.

A multi-rank check calls the kernel from the ranks of an in-process run,
which take turns on a thread of their own (``comm.LocalCluster``), so a
request may come from any thread: it uses the client's sockets directly
(never an event loop of the thread that made them), and one request at a
time holds the channel.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from jupyter_client import BlockingKernelClient
from jupyter_core.utils import run_sync

from minidist.labkit.serve import COMM_TARGET

MAX_PRINTED = 100_000  # characters of a request's printed output kept
LISTEN = "__import__('minidist.labkit.serve', fromlist=['listen']).listen()"


class CellTimeout(BaseException):
    """The cell's deadline passed while the kernel worked on a request."""


class KernelDied(BaseException):
    """The kernel stopped (exited, was killed, or hit its memory limit)."""


class NoReply(Exception):
    """The kernel finished a request without a reply (the notebook broke ``serve``)."""


class KernelChannel:
    """Requests to the kernel of ``executor`` (an nbclient ``NotebookClient``)."""

    def __init__(self, executor: Any):
        self.executor = executor
        self.client: BlockingKernelClient | None = None
        self.deadline = float("inf")
        self._lock = threading.Lock()
        self._comm: str | None = None  # the comm the kernel answers on, once opened

    def connect(self) -> None:
        if self.client is not None:
            self.client.stop_channels()
        self._comm = None
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
        self.deadline = deadline

    def _manage(self, method: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        """Run one of the kernel manager's coroutine methods from this thread."""
        if threading.current_thread() is threading.main_thread():
            return run_sync(method)()
        return asyncio.run(method())  # a ranks' thread: a loop of its own, closed after

    def _alive(self) -> bool:
        return bool(self._manage(self.executor.km.is_alive))

    def _execute(self, code: str, reply_wanted: bool = False) -> Any:
        """Run ``code`` as a cell; its reply (None if none) once the kernel is idle."""
        return self._send("execute_request", {
            "code": code, "silent": False, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": False}, reply_wanted)

    def _send(self, kind: str, content: dict, reply_wanted: bool) -> Any:
        """Send one message to the kernel; the reply it sent back on the comm (None if
        none) once it is idle again."""
        left = self.deadline - time.monotonic()
        if left <= 0 or not self._lock.acquire(timeout=-1 if left == float("inf") else left):
            raise CellTimeout
        try:
            return self._send_holding_the_lock(kind, content, reply_wanted)
        finally:
            self._lock.release()

    def _send_holding_the_lock(self, kind: str, content: dict, reply_wanted: bool) -> Any:
        if self.client is None:
            self.connect()
        iopub = self.client.iopub_channel
        while iopub.msg_ready():  # what the notebook's own cells published
            iopub.get_msg(timeout=0)
        message = self.client.session.msg(kind, content)
        self.client.shell_channel.send(message)
        msg_id = message["header"]["msg_id"]
        reply, printed, checked = None, 0, time.monotonic()
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
            if kind == "stream" and reply_wanted and printed < MAX_PRINTED:
                text = str(content.get("text", ""))[:MAX_PRINTED - printed]
                sys.stdout.write(text)
                printed += len(text)
            elif kind == "comm_msg" and reply is None:
                reply = content.get("data", {}).get("reply")
            elif kind == "status" and content.get("execution_state") == "idle":
                break
        while self.client.shell_channel.msg_ready():
            self.client.shell_channel.get_msg(timeout=0)
        return reply

    def _interrupt(self, msg_id: str) -> None:
        """Interrupt the request; wait a little for the kernel to be idle again."""
        self._manage(self.executor.km.interrupt_kernel)
        until = time.monotonic() + 5
        try:
            while True:
                msg = self.client.iopub_channel.get_msg(timeout=max(0.0, until - time.monotonic()))
                if (msg.get("parent_header", {}).get("msg_id") == msg_id
                        and msg["msg_type"] == "status"
                        and msg["content"].get("execution_state") == "idle"):
                    return
        except queue.Empty:
            pass

    def __call__(self, text: str) -> str:
        if self._comm is None:  # the kernel's side of the comm, then the comm
            self._execute(LISTEN)
            self._comm = uuid.uuid4().hex
            self._send("comm_open", {"comm_id": self._comm, "target_name": COMM_TARGET,
                                     "data": {}}, reply_wanted=False)
        reply = self._send("comm_msg", {"comm_id": self._comm, "data": {"request": text}},
                           reply_wanted=True)
        if not isinstance(reply, str):
            raise NoReply("the notebook's kernel gave no answer to the check (did the notebook "
                          "replace minidist.labkit?)")
        return reply

    def reset(self) -> None:
        """Start a check cell: the kernel forgets the last cell's tensors and results."""
        self("{\"op\": \"reset\"}")

    def run_quietly(self, source: str) -> bool:
        """Run a cell again after a restart, its output dropped; False if it failed to end."""
        try:
            self._execute(source, reply_wanted=False)
        except (CellTimeout, KernelDied):
            return False
        return True

    def responsive(self) -> bool:
        """Whether the kernel answers a trivial request within a few seconds."""
        self.deadline = time.monotonic() + 5
        try:
            self._execute("None", reply_wanted=False)
        except (CellTimeout, KernelDied):
            return False
        return True
