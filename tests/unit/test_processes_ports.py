"""A server's port: free, held for a moment, or held for good (inferq.tools.processes)."""

from __future__ import annotations

import socket
import threading
import time

from inferq.tools.processes import HOST, port_is_free, wait_port_free


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    sock.listen()
    return sock


def test_a_port_held_a_moment_is_free_once_let_go() -> None:
    holder = _listener()
    port = holder.getsockname()[1]
    assert not port_is_free(port)
    timer = threading.Timer(0.3, holder.close)
    timer.start()
    try:
        assert wait_port_free(port, time.monotonic() + 10)
    finally:
        timer.cancel()
        holder.close()


def test_a_port_held_for_good_is_refused_at_the_deadline() -> None:
    with _listener() as holder:
        port = holder.getsockname()[1]
        started = time.monotonic()
        assert not wait_port_free(port, started + 0.3)
        assert time.monotonic() - started < 5  # bounded by the deadline, not by the holder
