"""A worker's side of a parameter server: pull rows, push gradients, tick the clock.

    values = worker.pull(keys)          # the rows of ``keys``, concatenated in key order
    ...compute a gradient of the same shape...
    worker.push(keys, gradient)         # applied by the servers before push() returns
    worker.tick()                       # iteration finished: clock += 1 on every server

``ipull`` and ``ipush`` are the non-blocking forms: they return a handle
whose ``wait()`` returns the rows (a pull) or the versions (a push), so a
worker can overlap its next computation with the traffic. A worker splits
each request by server (``keys.py``: one key range per server) and sends it
to every server, with the keys that server holds, perhaps none: the servers
then all see the same sequence of requests from each worker, which keeps
their clocks, and on the in-process transport their orders, in step (a
server that never heard of a worker's pull might wait for that worker while
it waits for another server).

One rule keeps the servers' order deterministic: after a pull, a worker
sends nothing until the pull's answer has come (the server may be holding
the read back until slower workers catch up). A request made while a pull is
outstanding first waits for it.

Traffic per request to one server holding k of the keys (v values, b
bytes each): a push sends 48 B and 8k + b·v B and receives 8 B; a pull
sends 48 B and 8k B and receives 8 + b·v B (with k = 0: the 48 B header
and the 8 B answer only); tick, stop: 48 B to every server.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator, Request
from minidist.parallel.ps.keys import KeyLayout, reorder
from minidist.parallel.ps.messages import Header, Kind, pack, version_and_rows


class Handle:
    """A request in flight to some servers; ``wait()`` completes it (once) and returns
    its result."""

    def __init__(self, answers: list[tuple[int, Request, np.ndarray]], finish) -> None:
        self.answers, self.finish, self.done, self.result = answers, finish, False, None

    def wait(self):
        if not self.done:
            for _, request, _ in self.answers:
                request.wait()
            self.result, self.done = self.finish(self.answers), True
        return self.result


class Worker:
    """Worker ``worker`` (rank ``c.rank``) of a parameter server whose servers are the
    ranks ``servers``, holding the key ``ranges`` of ``layout``."""

    def __init__(self, c: Communicator, layout: KeyLayout, servers: list[int],
                 ranges: list[tuple[int, int]], dtype: np.dtype, clock: int = 0) -> None:
        self.c, self.layout, self.servers, self.ranges = c, layout, servers, ranges
        self.dtype, self.clock = dtype, clock
        self.versions = [0] * len(servers)  # the version of each shard last pulled
        self.outstanding_pull: Handle | None = None
        self.outstanding_pushes: list[Handle] = []
        self.begun = 0.0  # when the request being sent began (modelled clock; 0 under MPI)

    # --- the requests ------------------------------------------------------------------------
    def ipull(self, keys: np.ndarray) -> Handle:
        """Ask for the rows of ``keys``; ``wait()`` returns them, concatenated in the
        order of ``keys``."""
        keys = self.layout.check(keys)
        order, parts = self._route(keys)
        self._begin()
        answers = []
        for server, part in parts:
            answer = np.empty(8 + self.layout.value_count(part) * self.dtype.itemsize, np.uint8)
            answers.append((server, self._ask(server, answer), answer))
            payload = self.c.scratch(8 * part.size, np.uint8, "ps payload")
            self._request(server, Header(Kind.PULL, self.clock, part.size),
                          pack(part, None, payload) if part.size else None)
        handle = Handle(answers, lambda done: self._assemble(keys, order, parts, done))
        self.outstanding_pull = handle
        return handle

    def pull(self, keys: np.ndarray) -> np.ndarray:
        return self.ipull(keys).wait()

    def ipush(self, keys: np.ndarray, gradient: np.ndarray) -> Handle:
        """Send the gradient of the rows of ``keys`` (their values in the order of
        ``keys``, any shape of that size); ``wait()`` returns the servers' versions."""
        keys = self.layout.check(keys)
        gradient = np.asarray(gradient)
        expected = self.layout.value_count(keys)
        if gradient.size != expected:
            raise ValueError(f"push of {keys.size} keys needs {expected} gradient values "
                             f"(their rows' widths summed), got shape {gradient.shape}")
        gradient = np.ascontiguousarray(gradient, self.dtype).reshape(-1)
        order, parts = self._route(keys)
        if order is not None:  # rows into key order, as the servers store them
            gradient = reorder(self.layout, keys, order, gradient)
        self._begin()
        answers, start = [], 0
        for server, part in parts:
            count = self.layout.value_count(part)
            answer = np.empty(8, np.uint8)
            answers.append((server, self._ask(server, answer), answer))
            header = Header(Kind.PUSH, self.clock, part.size, count, self.versions[server])
            payload = self.c.scratch(header.payload_bytes(self.dtype.itemsize), np.uint8,
                                     "ps payload")
            self._request(server, header, pack(part, gradient[start:start + count], payload)
                          if part.size else None)
            start += count
        handle = Handle(answers, lambda done: [int(a.view(np.int64)[0]) for _, _, a in done])
        self.outstanding_pushes = [h for h in self.outstanding_pushes if not h.done]
        self.outstanding_pushes.append(handle)
        return handle

    def push(self, keys: np.ndarray, gradient: np.ndarray) -> list[int]:
        return self.ipush(keys, gradient).wait()

    def tick(self) -> None:
        """This worker finished an iteration: its clock advances on every server."""
        self.clock += 1
        self._begin()
        for server in range(len(self.servers)):
            self._request(server, Header(Kind.CLOCK, self.clock))

    def checkpoint(self) -> int:
        """Wait until every running worker has asked, at this same clock, and every server
        has saved its shard; returns the clock saved."""
        self._begin()
        answers = []
        for server in range(len(self.servers)):
            answer = np.empty(8, np.uint8)
            answers.append(self._ask(server, answer))
            self._request(server, Header(Kind.CHECKPOINT, self.clock))
        for request in answers:
            request.wait()
        return self.clock

    def stop(self) -> None:
        """Wait for every push to be applied, then tell every server this worker is done."""
        for handle in self.outstanding_pushes:
            handle.wait()
        self.outstanding_pushes.clear()
        self._begin()
        for server in range(len(self.servers)):
            self._request(server, Header(Kind.STOP, self.clock))

    # --- beneath: routing, sending, assembling ------------------------------------------------
    def _route(self, keys: np.ndarray) -> tuple[np.ndarray | None, list[tuple[int, np.ndarray]]]:
        """(the sorting order, None if sorted already; [(server, its keys, ascending)] for
        every server, some perhaps with none)."""
        order = None if np.all(keys[1:] > keys[:-1]) else np.argsort(keys, kind="stable")
        ordered = keys if order is None else keys[order]
        cuts = np.searchsorted(ordered, [first for first, _ in self.ranges[1:]])
        parts = np.split(ordered, cuts)
        return order, list(enumerate(parts))

    def _ask(self, server: int, answer: np.ndarray) -> Request:
        # communication: posted before the request, so a long answer never waits for it
        return self.c.irecv(answer, self.servers[server], Tag.PS_REPLY)

    def _begin(self) -> None:
        """A request begins: first the outstanding pull's answer (a worker sends nothing
        while one is out), then the time its copies to every server will carry."""
        if self.outstanding_pull is not None:
            self.outstanding_pull.wait()
            self.outstanding_pull = None
        self.begun = float(getattr(self.c.stats, "clock", 0.0))

    def _request(self, server: int, header: Header, payload: np.ndarray | None = None) -> None:
        header = Header(header.kind, header.clock, header.keys, header.values, header.version,
                        self.begun)
        # communication: the header, then (push, pull) the keys and rows
        self.c.send(header.to_array(), self.servers[server], Tag.PS_REQUEST)
        if payload is not None:
            self.c.send(payload, self.servers[server], Tag.PS_PAYLOAD)

    def _assemble(self, keys: np.ndarray, order: np.ndarray | None,
                  parts: list[tuple[int, np.ndarray]], answers: list) -> np.ndarray:
        rows = []
        for server, _, answer in answers:
            self.versions[server], part_rows = version_and_rows(answer, self.dtype)
            rows.append(part_rows)
        # one server: its answer, a fresh buffer, is the result as it stands
        ordered = rows[0] if len(rows) == 1 else np.concatenate(rows)
        if order is None:
            return ordered
        return reorder(self.layout, keys, order, ordered, back=True)
