"""A worker's side of a parameter server: pull rows, push gradients, tick the clock.

    values = worker.pull(keys)          # the rows of ``keys``, concatenated in their order
    ...compute a gradient of the same shape...
    worker.push(keys, gradient)         # taken by the servers before push() returns:
                                        # applied (ASP, SSP), held until every worker has
                                        # ticked (BSP), or added to n-softsync's c gradients
    worker.tick()                       # iteration finished: clock += 1 on every server

    values = worker.push_pull(keys, gradient)   # the last three in one round trip

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
bytes each): a push sends 48 + 8k + b·v B and receives 8 B; a pull sends
48 + 8k B and receives 8 + b·v B (with k = 0: the 48 B header and the 8 B
answer only); a push_pull sends a push's and receives a pull's; tick,
stop: 48 B to every server. A request is one message, or two when its
payload (the 8k + b·v or 8k B) is over ``INLINE_BYTES`` (``messages.py``);
an answer is one message.
"""

from __future__ import annotations

import numpy as np

from minidist.comm.tags import Tag
from minidist.comm.transport.communicator import Communicator, Request
from minidist.parallel.ps.keys import KeyLayout
from minidist.parallel.ps.messages import HEADER_BYTES, Header, Kind, version_and_rows
from minidist.parallel.ps.plans import LastKeys, Part, Route


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
        self.modelled = hasattr(c.stats, "clock")
        # the last key set's route: a push after a pull of the same keys reuses it (plans.py)
        self.routes = LastKeys(lambda keys: Route(layout, ranges, keys))

    # --- the requests ------------------------------------------------------------------------
    def ipull(self, keys: np.ndarray) -> Handle:
        """Ask for the rows of ``keys``; ``wait()`` returns them, concatenated in the
        order of ``keys``."""
        route = self.routes(keys)
        self._begin()
        answers = []
        for part in route.parts:
            answer = np.empty(8 + part.count * self.dtype.itemsize, np.uint8)
            answers.append((part.server, self._ask(part.server, answer), answer))
            self._request(part.server, Kind.PULL, part)
        handle = Handle(answers, lambda done: self._assemble(route, done))
        self.outstanding_pull = handle
        return handle

    def pull(self, keys: np.ndarray) -> np.ndarray:
        return self.ipull(keys).wait()

    def ipush(self, keys: np.ndarray, gradient: np.ndarray) -> Handle:
        """Send the gradient of the rows of ``keys`` (their values in the order of
        ``keys``, any shape of that size); ``wait()`` returns the servers' versions when
        they took it (under BSP and n-softsync, before it is applied: module docstring)."""
        route, gradient = self._checked_push(keys, gradient)
        self._begin()
        answers = []
        for part in route.parts:
            answer = np.empty(8, np.uint8)
            answers.append((part.server, self._ask(part.server, answer), answer))
            self._push_request(Kind.PUSH, route, part, gradient)
        handle = Handle(answers, lambda done: [int(a.view(np.int64)[0]) for _, _, a in done])
        self.outstanding_pushes = [h for h in self.outstanding_pushes if not h.done]
        self.outstanding_pushes.append(handle)
        return handle

    def push(self, keys: np.ndarray, gradient: np.ndarray) -> list[int]:
        return self.ipush(keys, gradient).wait()

    def ipush_pull(self, keys: np.ndarray, gradient: np.ndarray) -> Handle:
        """A training step's traffic in one round trip: ``push(keys, gradient)``,
        ``tick()``, then ``pull(keys)`` for the next iteration, as one request to each
        server; ``wait()`` returns the rows, as ``pull``'s does."""
        route, gradient = self._checked_push(keys, gradient)
        self._begin()
        answers = []
        for part in route.parts:
            answer = np.empty(8 + part.count * self.dtype.itemsize, np.uint8)
            answers.append((part.server, self._ask(part.server, answer), answer))
            self._push_request(Kind.PUSH_PULL, route, part, gradient)
        self.clock += 1
        handle = Handle(answers, lambda done: self._assemble(route, done))
        self.outstanding_pull = handle
        return handle

    def push_pull(self, keys: np.ndarray, gradient: np.ndarray) -> np.ndarray:
        return self.ipush_pull(keys, gradient).wait()

    def tick(self) -> None:
        """This worker finished an iteration: its clock advances on every server."""
        self.clock += 1
        self._begin()
        for server in range(len(self.servers)):
            self._request(server, Kind.CLOCK)

    def checkpoint(self) -> int:
        """Wait until every running worker has asked, at this same clock, and every server
        has saved its shard; returns the clock saved. Call it between ``tick()`` and the
        next pull: a read taken before it (``push_pull``'s) is not one a resumed run makes."""
        self._begin()
        answers = []
        for server in range(len(self.servers)):
            answer = np.empty(8, np.uint8)
            answers.append(self._ask(server, answer))
            self._request(server, Kind.CHECKPOINT)
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
            self._request(server, Kind.STOP)

    # --- beneath: sending, assembling (routing: plans.py) ----------------------------------
    def _ask(self, server: int, answer: np.ndarray) -> Request:
        # communication: posted before the request, so a long answer never waits for it
        return self.c.irecv(answer, self.servers[server], Tag.PS_REPLY)

    def _begin(self) -> None:
        """A request begins: first the outstanding pull's answer (a worker sends nothing
        while one is out), then the time its copies to every server will carry."""
        if self.outstanding_pull is not None:
            self.outstanding_pull.wait()
            self.outstanding_pull = None
        self.begun = float(self.c.stats.clock) if self.modelled else 0.0

    def _checked_push(self, keys: np.ndarray, gradient: np.ndarray) -> tuple[Route, np.ndarray]:
        route = self.routes(keys)
        gradient = np.asarray(gradient)
        if gradient.size != route.count:
            raise ValueError(f"push of {route.keys.size} keys needs {route.count} gradient "
                             f"values (their rows' widths summed), got shape {gradient.shape}")
        return route, np.ascontiguousarray(gradient, self.dtype)

    def _push_request(self, kind: Kind, route: Route, part: Part, gradient: np.ndarray) -> None:
        # its keys, then their rows in the same order
        self._request(part.server, kind, part, self.versions[part.server], (route, gradient))

    def _request(self, server: int, kind: Kind, part: Part | None = None, version: int = -1,
                 push: tuple[Route, np.ndarray] | None = None) -> None:
        """Send a request: its header, then its payload: ``part``'s keys and, for a push,
        their rows of the gradient (``push``: its route and the gradient) in that order."""
        keys = 0 if part is None else part.keys.size
        values = 0 if push is None else part.count
        header = Header(kind, self.clock, keys, values, version, self.begun)
        size = header.payload_bytes(self.dtype.itemsize)
        inline = header.inline_bytes(self.dtype.itemsize)  # the small-message path
        message = np.empty(HEADER_BYTES + inline, np.uint8)
        header.write(message)
        follows = None
        if inline == size:  # 1. all of it rides in the header's message
            if size:
                self._pack(part, push, message[HEADER_BYTES:])
        elif inline:  # 2. the keys ride along; a push's rows follow, as they lie if they can
            route, gradient = push
            message[HEADER_BYTES:] = part.key_bytes
            follows = route.rows_as_they_lie(part, gradient)
            if follows is None:
                follows = route.take_rows(part, gradient, self.c.scratch(
                    size - inline, np.uint8, "ps payload"))  # kept: no page faults per request
        else:  # 3. too many keys to ride along: the whole payload follows
            follows = self._pack(part, push, self.c.scratch(size, np.uint8, "ps payload"))
        # communication: the header, with the payload (or its keys) behind it if short
        self.c.send(message, self.servers[server], Tag.PS_REQUEST)
        if follows is not None:
            # communication: the rest of a long payload, after its header
            self.c.send(follows, self.servers[server], Tag.PS_PAYLOAD)

    @staticmethod
    def _pack(part: Part, push: tuple[Route, np.ndarray] | None,
              payload: np.ndarray) -> np.ndarray:
        if push is None:
            payload[...] = part.key_bytes  # a pull's payload: its keys
            return payload
        route, gradient = push
        return route.pack_push(part, gradient, payload)

    def _assemble(self, route: Route, answers: list) -> np.ndarray:
        rows = []
        for server, _, answer in answers:
            self.versions[server], part_rows = version_and_rows(answer, self.dtype)
            rows.append(part_rows)
        return route.assemble(rows)
