"""The student's ranks driving real MPI processes that belong to the grader.

Task 6 of Labs 2 and 3 runs the student's function on real MPI processes. Had
the student's kernel started them (``md.launch(..., backend="mpi")``), their
counters would be counted where the student's code runs, and could be forged.
When a lab is graded the function lives in the kernel (a ``Remote``), and the
check runs it this way instead:

1. the grader starts P MPI processes of its own (:class:`MPIRanks`:
   ``mpiexec`` of ``mpi_rank_server.py``, which runs no student code), each
   joined to the grader by a unix socket;
2. the student's function runs on the grader's in-process ranks as in every
   multi-rank check (``ranks.run_ranks``), but each rank lends the kernel a
   :class:`MPIRankCommunicator`: the student's ``send``, ``recv``, ``isend``,
   ``irecv``, a request's ``wait``, ``sendrecv`` and ``barrier`` become that
   operation on its MPI process, posted there and polled from here, the other
   ranks taking their turns meanwhile;
3. the bytes and messages are the MPI processes' own counters, read at the end.

So what crosses between MPI processes is real MPI traffic between real
processes, and what it is counted as is the grader's; the student's code
decides only which operations it asks for.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import psutil

from minidist.comm import CommStats, Communicator, Request
from minidist.comm.errors import CommError
from minidist.comm.transport.communicator import check_point_to_point
from minidist.labkit import wire
from minidist.labkit.ranks import run_ranks
from minidist.labkit.relay import COUNTERS
from minidist.util.mpiexec import mpiexec_command, rank_environment
from minidist.util.processes import stop_process_tree
from minidist.util.shm import remove_left_segments

START_S = 60.0  # for the MPI processes to start and join the grader


class MPIRanks:
    """``with MPIRanks(P) as ranks``: P MPI processes of the grader, ready for requests."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.lines: list[socket.socket] = []
        self.job: subprocess.Popen | None = None

    def __enter__(self) -> MPIRanks:
        self.started = time.time()
        folder = tempfile.mkdtemp(prefix="minidist-mpi-ranks-")
        path = os.path.join(folder, "line")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(self.world_size)
            command = mpiexec_command(self.world_size,
                                      ["-m", "minidist.labkit.mpi_rank_server", path])
            self.said = tempfile.TemporaryFile()  # what mpiexec says, read if it fails
            self.job = subprocess.Popen(command, env=rank_environment(self.world_size),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self.said, start_new_session=True)
            self.lines = self._joined(listener, time.monotonic() + START_S)
        except BaseException:
            self.__exit__()
            raise
        finally:
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            os.rmdir(folder)
        return self

    def _joined(self, listener: socket.socket, deadline: float) -> list[socket.socket]:
        """Every rank's line, in rank order, once each has said its rank."""
        lines: dict[int, socket.socket] = {}
        while len(lines) < self.world_size:
            if self.job.poll() is not None:
                self.said.seek(0)
                raise RuntimeError(f"the grader's MPI ranks ended at start: "
                                   f"{self.said.read().decode(errors='replace')[-2000:]}")
            listener.settimeout(max(0.01, min(0.5, deadline - time.monotonic())))
            if time.monotonic() > deadline:
                raise RuntimeError(f"the grader's MPI ranks did not start within {START_S:g} s")
            try:
                line, _ = listener.accept()
            except TimeoutError:
                continue
            if not self._started_by_the_job(line):
                line.close()  # only the job's processes may join
                continue
            line.settimeout(None)
            lines[int(self._read(line)["rank"])] = line
        return [lines[rank] for rank in range(self.world_size)]

    def _started_by_the_job(self, line: socket.socket) -> bool:
        pid, _, _ = struct.unpack("3i", line.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        try:
            return any(parent.pid == self.job.pid for parent in psutil.Process(pid).parents())
        except psutil.Error:
            return False

    def call(self, rank: int, **request: Any) -> dict:
        """One request to rank ``rank``'s process, and its answer; its error raised."""
        line = self.lines[rank]
        send_message(line, request)
        answer = self._read(line)
        if "error" in answer:
            name, message = answer["error"]
            raise (ValueError if name == "ValueError" else CommError)(
                f"rank {rank}: {message}")
        return answer

    @staticmethod
    def _read(line: socket.socket) -> dict:
        message = read_message(line)
        if message is None:
            raise CommError("an MPI rank of the grader ended")
        return message

    def stats(self) -> list[CommStats]:
        """Each MPI process's counters: what really went between them."""
        return [CommStats(**{name: int(self.call(rank, op="stats")[name]) for name in COUNTERS})
                for rank in range(self.world_size)]

    def __exit__(self, *exc: object) -> None:
        for line in self.lines:
            try:
                line.settimeout(5.0)
                send_message(line, {"op": "end"})
                read_message(line)
            except OSError:  # gone, or not answering: stopped below
                pass
            line.close()
        if self.job is not None:
            try:
                self.job.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            stop_process_tree(self.job)
            remove_left_segments(self.started)  # what MPICH leaves when its ranks are stopped
            self.said.close()


def run_on_mpi_ranks(ranks: MPIRanks, body: Callable[[Communicator], Any], what: str,
                     block: tuple[str, ...]) -> tuple[list[Any], list[CommStats]]:
    """``body(c)`` on the student's ranks, ``c`` on the grader's MPI processes ``ranks``
    (module docstring), with ``block`` blocked; the results, and what the MPI processes
    counted during the run."""
    __tracebackhide__ = True
    before = ranks.stats()
    results, _ = run_ranks(lambda c: body(MPIRankCommunicator(c, ranks)), ranks.world_size,
                           what, block)
    after = ranks.stats()
    return results, [CommStats(**{name: getattr(a, name) - getattr(b, name) for name in COUNTERS})
                     for a, b in zip(after, before, strict=True)]


class MPIRankCommunicator(Communicator):
    """Rank ``c.rank`` of the student's ranks, each operation done on the grader's MPI
    process of that rank (``ranks``); ``c`` is the rank's in-process communicator,
    used only to take turns while an operation waits."""

    def __init__(self, c: Communicator, ranks: MPIRanks) -> None:
        self.turns, self.ranks = c, ranks
        self.rank, self.size = c.rank, c.size
        self.stats = CommStats()  # what this rank asked for; MPIRanks.stats() is the verdict

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        check_point_to_point(self.rank, self.size, "send", dest, tag, buf)
        self.stats.messages_sent += 1
        self.stats.bytes_sent += buf.nbytes
        # communication: posted on this rank's MPI process
        number = self.ranks.call(self.rank, op="isend", data=buf, dest=dest, tag=tag)["id"]
        return MPIRankRequest(self, number, None)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        check_point_to_point(self.rank, self.size, "recv", source, tag, buf)
        if not buf.flags.writeable:
            raise ValueError(f"rank {self.rank}: recv needs a writeable buffer")
        self.stats.messages_recv += 1
        self.stats.bytes_recv += buf.nbytes
        # communication: posted on this rank's MPI process
        number = self.ranks.call(self.rank, op="irecv", shape=list(buf.shape),
                                 dtype=buf.dtype.str, source=source, tag=tag)["id"]
        return MPIRankRequest(self, number, buf)

    def send(self, buf: np.ndarray, dest: int, tag: int = 0) -> None:
        self.isend(buf, dest, tag).wait()

    def recv(self, buf: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        self.irecv(buf, source, tag).wait()
        return buf

    def irecv_upto(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        raise NotImplementedError("irecv_upto is not offered on the grader's MPI ranks")

    def wait_any(self, requests: Sequence[Request]) -> int:
        if not requests:
            raise ValueError(f"rank {self.rank}: wait_any needs at least one request")
        while True:
            for index, request in enumerate(requests):
                if request.test():
                    return index
            self.take_turns()

    def barrier(self) -> None:
        MPIRankRequest(self, self.ranks.call(self.rank, op="ibarrier")["id"], None).wait()

    def split(self, color: int, key: int = 0) -> Communicator:
        raise NotImplementedError("split is not offered on the grader's MPI ranks")

    def dup(self) -> Communicator:
        raise NotImplementedError("dup is not offered on the grader's MPI ranks")

    def take_turns(self) -> None:
        """Let the other ranks ask for what this one waits for."""
        self.turns.fabric.pass_turn(self.turns.state.world_rank)

class MPIRankRequest(Request):
    """An operation posted on a grader's MPI process: polled until it completes; a
    receive's data then lands in its buffer."""

    def __init__(self, comm: MPIRankCommunicator, number: int, buf: np.ndarray | None) -> None:
        self.comm, self.number, self.buf, self.completed = comm, number, buf, False

    def test(self) -> bool:
        if not self.completed:
            answer = self.comm.ranks.call(self.comm.rank, op="test", id=self.number)
            if answer["done"]:
                if self.buf is not None:
                    self.buf[...] = answer["data"]
                self.completed = True
        return self.completed

    def wait(self) -> None:
        while not self.test():
            self.comm.take_turns()


def send_message(line: socket.socket, message: dict) -> None:
    """A request or an answer between the grader and one of its MPI ranks: data only
    (``wire.py``), both ways."""
    wire.send_text(line, json.dumps(wire.encode(message, _nothing)))


def read_message(line: socket.socket) -> dict | None:
    """The next message on ``line``; None once the other end has closed it."""
    text = wire.recv_text(line)
    return None if text is None else wire.decode(wire.loads(text), _nothing, frozenset())


def _nothing(*_: Any) -> None:  # no object crosses by reference here
    return None

