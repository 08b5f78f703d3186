"""Autograde with the checks out of the student's reach.

nbgrader executes a notebook cell by cell in one kernel, test cells
included, so a student's code runs in the same interpreter as the checks
that grade it and could redefine, patch or read them. ``TrustedExecute``
replaces nbgrader's ``Execute`` step:

1. every cell a student could write runs in the sandboxed kernel, as before;
2. the lab's locked cells are the release's (``checks_file``, written by the
   grader from the release it built); the setup cells run in the kernel and
   also here, and the test cells run only here, in the grader's process,
   which never executes student code. A name a check uses that the setup
   did not define is a ``labkit.remote.Remote``: calling it calls the
   student's object in the kernel with data (``labkit/wire.py``), and what
   comes back is data the check judges here. The cell's outputs (its printed
   pass line, or the one-sentence failure) are written by this process, so
   nbgrader's grade of the cell is the check's verdict;
3. a kernel that dies in a cell (``os._exit``, a signal, the memory limit)
   is restarted, and the cells that had run are run again, so the tasks that
   do not depend on the dead cell are still graded; a kernel that no longer
   answers after a timeout is restarted the same way, and so is one whose
   cell's output had not ended ``iopub_timeout`` seconds after its reply (a
   flood the grader reads behind; nbgrader's own setting makes that an error
   that loses the whole notebook). Of a cell's outputs the grader keeps
   ``MAX_KEPT`` characters: the kernel cuts what a cell prints first
   (``sandbox.py``), so this bounds only a kernel the notebook changed.

A lab without a ``checks_file`` entry (its checks not yet written for
remote objects) runs its test cells in the kernel, as plain nbgrader does.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import zmq
from jupyter_core.utils import run_sync
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Unicode

from minidist.course.channel import CellTimeout, KernelChannel, KernelDied, is_idle
from minidist.labkit.remote import Remote, Session

QUIET_S, DRAIN_S = 0.05, 10.0  # what the kernel published for a check: dropped (see below)
MAX_KEPT = 2_000_000  # characters of a cell's outputs kept; the rest is dropped
DIED = ("the kernel died in this cell (os._exit, a signal, or the memory limit); it was "
        "restarted and the cells before this one were run again")


def free_names(source: str) -> set[str]:
    """Names ``source`` reads that it neither assigns nor binds as arguments."""
    tree = ast.parse(source)
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.alias)):
            bound.add(getattr(node, "asname", None) or node.name.split(".")[0])
    return read - bound - set(vars(builtins))


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


class TrustedExecute(Execute):
    """nbgrader's Execute, with the lab's checks run in this process (module docstring)."""

    checks_file = Unicode("", help="JSON: grade_id -> {source, test} of the lab's locked "
                          "cells; the lab's checks run in the grader when it lists them"
                          ).tag(config=True)
    raise_on_iopub_timeout = Bool(False, help="Whether a cell whose output has not ended "
                                  "iopub_timeout s after its reply fails the notebook (here, "
                                  "the kernel is restarted instead)").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: Any = None, km: Any = None) -> Any:
        lab = (resources or {}).get("nbgrader", {}).get("assignment", "")
        table = json.loads(Path(self.checks_file).read_text()) if self.checks_file else {}
        self._checks: dict[str, dict] = table.get(lab, {})
        self._namespace: dict[str, Any] = {"__name__": "__check__"}
        for check in self._checks.values():  # the setup, even if the student deleted it
            if not check["test"]:
                exec(compile(check["source"], "<setup>", "exec"), self._namespace)
        self._ran: list[str] = []
        self._channel = KernelChannel(self)
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell: NotebookNode, resources: Any, index: int) -> Any:
        if cell.cell_type != "code":
            return cell, self.resources
        check = self._checks.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
        if check is not None:
            cell.source = check["source"]
            if check["test"]:
                cell.outputs = self._run_check(check["source"])
                self._drop_what_the_check_published()
                return cell, self.resources
        self._ended, self._kept, launched = False, 0, self.code_cells_executed
        try:
            cell = self.execute_cell(cell, index, store_history=True)
        except DeadKernelError:
            cell.outputs = [error_output("DeadKernelError", DIED)]
            self.restart()
            return cell, self.resources
        stopped = any(o.get("ename") == "CellTimeoutError" for o in cell.outputs)
        if not stopped:
            self._ran.append(cell.source)
        behind = self.code_cells_executed > launched and not self._ended
        if behind or (stopped and not self._channel.responsive()):
            self.restart()  # what the kernel still had to send goes with it
        return cell, self.resources

    def process_message(self, msg: dict, cell: NotebookNode, cell_index: int) -> Any:
        """nbclient's, noting that the cell's output has ended (the kernel is idle again)."""
        if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
            self._ended = True
        return super().process_message(msg, cell, cell_index)

    def output(self, outs: list, msg: dict, display_id: str | None, cell_index: int) -> Any:
        """nbclient's, but a cell's outputs past ``MAX_KEPT`` characters are dropped."""
        content = msg["content"]
        self._kept += len(str(content.get("text", ""))) + sum(
            len(str(value)) for value in (content.get("data") or {}).values())
        return super().output(outs, msg, display_id, cell_index) \
            if self._kept <= MAX_KEPT else None

    def _run_check(self, source: str) -> list[NotebookNode]:
        """Run a test cell here; the student's names reach the kernel as ``Remote``s."""
        session = Session(self._channel)
        for name in free_names(source):  # what the setup defined stays the grader's own
            if name not in self._namespace or isinstance(self._namespace[name], Remote):
                self._namespace[name] = session.name(name)
        printed, outputs = io.StringIO(), []
        self._channel.start_cell(time.monotonic() + (self.timeout or 60))
        try:
            with redirect_stdout(printed):
                try:
                    self._channel.reset()
                    exec(compile(source, "<check>", "exec"), self._namespace)
                finally:  # the kernel stops serving the check; what it printed comes
                    self._channel.end_cell()
        except CellTimeout:
            outputs.append(error_output(self.error_on_timeout["ename"],
                                        self.error_on_timeout["evalue"]))
            if not self._channel.responsive():
                self.restart()
        except KernelDied:
            outputs.append(error_output("DeadKernelError", DIED))
            self.restart()
        except Exception as error:  # the check's one sentence (CheckFailed), or its own fault
            outputs.append(error_output(type(error).__name__, str(error)))
        if printed.getvalue():
            outputs.insert(0, NotebookNode(output_type="stream", name="stdout",
                                           text=printed.getvalue()[-100_000:]))
        return outputs

    def _drop_what_the_check_published(self) -> None:
        """Drop what the kernel published to nbclient's client while it served the check
        (its serving cell's status, input and printed text), up to that cell's idle
        status, or, where no cell served it or that status never comes, until none has
        come for ``QUIET_S``; nbclient would otherwise read them while it waits for the
        next cell's output."""
        socket = zmq.Socket.shadow(self.kc.iopub_channel.socket.underlying)
        session, serving = self.kc.session, self._channel.serving
        until = time.monotonic() + DRAIN_S
        while time.monotonic() < until and socket.poll(QUIET_S * 1000):
            _, frames = session.feed_identities(socket.recv_multipart())
            if serving and is_idle(session.deserialize(frames), serving):
                return

    def restart(self) -> None:
        """A fresh kernel, which runs again every cell that had run without failing."""
        run_sync(self.km.restart_kernel)(now=True)
        self.kc.stop_channels()
        self.start_new_kernel_client()
        self._channel.connect()
        for source in self._ran:
            self._channel.start_cell(time.monotonic() + (self.timeout or 60))
            if not self._channel.run_quietly(source):
                break
