"""One of the grader's MPI ranks: it does on MPI what the grader asks, and counts it.

    mpiexec -n P python -m mpi4py -m minidist.labkit.mpi_rank_server SOCKET

Started by the grader (``mpi_ranks.MPIRanks``), never by a student's kernel: no
student code runs here. Each rank connects to the grader's unix socket
``SOCKET``, says its rank, then answers one request at a time, as data
(``wire.py``, no pickle):

- ``isend`` (an array, dest, tag) and ``irecv`` (shape, dtype, source, tag):
  posted on ``MPI.COMM_WORLD`` through the library's MPI transport, which
  counts them; the answer is the request's number;
- ``ibarrier``: posted likewise;
- ``test`` (a number): whether that request has completed, and a receive's
  data once it has (the request is then forgotten);
- ``stats``: this rank's counters; ``end``: the same, and the rank exits.

Nothing here blocks in MPI: the grader polls with ``test``, so that while one
rank waits it can let the student's other ranks ask for what would release it.
"""

from __future__ import annotations

import itertools
import socket
import sys
from typing import Any

import numpy as np
from mpi4py import MPI

from minidist.comm.transport.mpi import MPICommunicator, MPIRequest
from minidist.labkit.mpi_ranks import read_message, send_message
from minidist.labkit.relay import COUNTERS


def serve(path: str) -> None:
    comm = MPICommunicator(MPI.COMM_WORLD)
    line = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    line.connect(path)
    send_message(line, {"rank": comm.rank})
    # number -> (request, its buffer, kept until it completes; whether it is answered)
    pending: dict[int, tuple[Any, np.ndarray | None, bool]] = {}
    numbers = itertools.count()
    while (request := read_message(line)) is not None:
        op = request.get("op")
        try:
            if op in ("stats", "end"):
                send_message(line, {name: getattr(comm.stats, name) for name in COUNTERS})
                if op == "end":
                    break
                continue
            if op == "test":
                mpi_request, buf, answered = pending[request["id"]]
                done = mpi_request.test()
                if done:
                    del pending[request["id"]]
                send_message(line, {"done": bool(done), "data": buf if done and answered else None})
                continue
            number = next(numbers)
            if op == "isend":
                data = request["data"]
                pending[number] = (comm.isend(data, request["dest"], request["tag"]), data, False)
            elif op == "irecv":
                buf = np.empty(tuple(request["shape"]), np.dtype(request["dtype"]))
                pending[number] = (comm.irecv(buf, request["source"], request["tag"]), buf, True)
            elif op == "ibarrier":
                barrier = MPIRequest(MPI.COMM_WORLD.Ibarrier(), MPI.COMM_WORLD)
                pending[number] = (barrier, None, False)
            else:
                raise ValueError(f"no operation {op!r}")
            send_message(line, {"id": number})
        except Exception as error:  # noqa: BLE001  (the grader names it to the student)
            send_message(line, {"error": [type(error).__name__, str(error)[:2000]]})
    line.close()


if __name__ == "__main__":
    serve(sys.argv[1])
