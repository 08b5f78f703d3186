"""The grader's line to a kernel: messages on a stream socket (``wire.send_text``,
``wire.recv_text``) and the kernel's loop that serves a check on it (``serve.serve_line``)."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading

import pytest

from minidist.labkit import serve, wire


def test_messages_cross_whole_in_order_and_a_closed_line_reads_none():
    left, right = socket.socketpair()
    texts = ["", "é" * 3, "x" * 1_000_003]
    sender = threading.Thread(target=lambda: [wire.send_text(left, t) for t in texts])
    sender.start()
    assert [wire.recv_text(right) for _ in texts] == texts
    sender.join()
    left.close()
    assert wire.recv_text(right) is None


def test_a_length_past_the_limit_is_refused_unread():
    left, right = socket.socketpair()
    left.sendall(wire.LENGTH.pack(wire.MAX_MESSAGE_CHARS * 4 + 1))
    with pytest.raises(wire.WireError, match="too large"):
        wire.recv_text(right)


@pytest.mark.timeout(30)
def test_the_kernels_loop_answers_until_an_empty_message():
    """``serve_line`` joins the socket the grader listens on, answers each request with
    ``answer``'s reply, and returns on an empty message."""
    path = os.path.join(tempfile.mkdtemp(), "line")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        kernel = threading.Thread(target=serve.serve_line, args=(path,))
        kernel.start()
        line, _ = listener.accept()
        wire.send_text(line, json.dumps({"op": "reset"}))
        assert json.loads(wire.recv_text(line)) == {"value": None}
        wire.send_text(line, "not json")
        assert "error" in json.loads(wire.recv_text(line))
        wire.send_text(line, "")
        kernel.join(timeout=10)
        assert not kernel.is_alive()
        line.close()
