"""Hostile clients against the real server: ingest and results on uvicorn with inferq's HTTP limits,
on free loopback ports, spoken to over raw sockets (a client library would not misbehave like this).

A slow or stalled body is 408 and the connection is dropped; so are headers that never finish, or a
connection that never says anything; oversized headers are 431; past the connection limit, 503.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inferq.ingest.app import create_app as create_ingest
from inferq.ingest.settings import IngestSettings
from inferq.results.app import create_app as create_results
from inferq.results.settings import ResultsSettings
from inferq.serving import EmbeddedServer, HttpLimits, uvicorn_config
from tests.hostile.conftest import HostileFigures
from tests.support.fakes import FakeBacklog, FakeResultFeed, RecordingProducer
from tests.support.inprocess import free_port
from tests.support.waiting import wait_until

BODY_TIMEOUT_S = 0.5
HEADER_TIMEOUT_S = 0.5
LIMITS = HttpLimits(header_timeout_s=HEADER_TIMEOUT_S, max_header_bytes=4_096, limit_concurrency=20)
CHAT = json.dumps({"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}).encode()


@contextlib.contextmanager
def serving(app: Any, limits: HttpLimits = LIMITS) -> Iterator[int]:
    """`app` on uvicorn (its own thread and loop) on a free port; yields the port."""
    port = free_port()
    server = EmbeddedServer(uvicorn_config(app, "127.0.0.1", port, limits=limits))
    thread = threading.Thread(target=server.run, name="hostile-uvicorn", daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "uvicorn starting", 10)
    assert server.started, "uvicorn did not start: its thread ended"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def ingest_port() -> Iterator[int]:
    settings = IngestSettings(body_timeout_s=BODY_TIMEOUT_S)
    app = create_ingest(settings, producer=RecordingProducer(), check_topics=False, backlog=FakeBacklog())
    with serving(app) as port:
        yield port


@pytest.fixture(scope="module")
def results_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    db: Path = tmp_path_factory.mktemp("results") / "r.db"
    app = create_results(ResultsSettings(db_path=db), check_topics=False, feed=FakeResultFeed)
    with serving(app) as port:
        yield port


class Conversation:
    """One raw TCP connection: send bytes (tolerating the server hanging up), read until it closes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)

    def send(self, data: bytes) -> bool:
        """False when the server had already closed the connection."""
        try:
            self.sock.sendall(data)
        except OSError:
            return False
        return True

    def answer(self, timeout_s: float = 5.0) -> tuple[float, bytes, bool]:
        """(seconds waited, everything received, whether the server closed the connection); then
        the connection is closed on this side too."""
        started = time.monotonic()
        self.sock.settimeout(timeout_s)
        received = b""
        closed = False
        try:
            while chunk := self.sock.recv(65_536):
                received += chunk
            closed = True
        except TimeoutError:
            pass
        except ConnectionResetError:
            closed = True
        finally:
            self.sock.close()
        return time.monotonic() - started, received, closed

    def close(self) -> None:
        self.sock.close()


def status_of(received: bytes) -> int:
    return int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else 0


def note(figures: HostileFigures, status: int, area: str = "http server") -> None:
    figures.tried(area)
    if status >= 500 and status != 503:
        figures.server_errors += 1


def post_head(length: int | None, *, extra: bytes = b"") -> bytes:
    framing = b"content-length: %d\r\n" % length if length is not None else b"transfer-encoding: chunked\r\n"
    return (
        b"POST /v1/requests HTTP/1.1\r\nhost: ingest\r\ncontent-type: application/json\r\n"
        + framing
        + extra
        + b"\r\n"
    )


def test_a_well_behaved_client_is_served_on_a_kept_alive_connection(ingest_port, hostile_figures):
    talk = Conversation(ingest_port)
    talk.send(post_head(len(CHAT)) + CHAT)
    talk.send(post_head(len(CHAT), extra=b"connection: close\r\n") + CHAT)
    _, received, closed = talk.answer()
    note(hostile_figures, status_of(received))
    assert received.count(b"HTTP/1.1 202 Accepted") == 2, received[:300]
    assert closed


@pytest.mark.parametrize("sent", [0, 10, len(CHAT) - 1])
def test_a_slow_or_stalled_body_is_408_and_the_connection_dropped(ingest_port, hostile_figures, sent):
    talk = Conversation(ingest_port)
    # Timed from before the send: the server's deadline starts once it has the headers, which is
    # after this, while `answer` starts its clock after the send (a CI run saw 0.4999 s from there).
    sending = time.monotonic()
    talk.send(post_head(len(CHAT)) + CHAT[:sent])
    _, received, closed = talk.answer()
    waited = time.monotonic() - sending
    note(hostile_figures, status_of(received), "http server: slow sender")
    assert status_of(received) == 408, received[:300]
    assert b"connection: close" in received.lower()
    assert b"request body not received within 0.5 s" in received
    assert closed, "the slow sender's connection was kept"
    assert BODY_TIMEOUT_S <= waited < BODY_TIMEOUT_S + 2


def test_a_body_trickled_byte_by_byte_is_cut_at_the_deadline(ingest_port, hostile_figures):
    talk = Conversation(ingest_port)
    talk.send(post_head(len(CHAT)))
    started = time.monotonic()
    for byte in CHAT[:-1]:
        if not talk.send(bytes([byte])):
            break
        time.sleep(0.05)
        if time.monotonic() - started > BODY_TIMEOUT_S + 2:
            break
    _, received, closed = talk.answer()
    note(hostile_figures, status_of(received), "http server: slow sender")
    assert status_of(received) == 408 and closed


def test_a_content_length_larger_than_the_body_is_408(ingest_port, hostile_figures):
    talk = Conversation(ingest_port)
    talk.send(post_head(len(CHAT) + 100) + CHAT)
    _, received, closed = talk.answer()
    note(hostile_figures, status_of(received), "http server: lying content-length")
    assert status_of(received) == 408 and closed


def test_a_content_length_smaller_than_the_body_is_4xx(ingest_port, hostile_figures):
    talk = Conversation(ingest_port)
    talk.send(post_head(len(CHAT) - 10) + CHAT)
    _, received, _ = talk.answer()
    note(hostile_figures, status_of(received), "http server: lying content-length")
    # The declared bytes are a truncated body (400); the rest is no request at all (400).
    assert status_of(received) == 400, received[:300]
    assert b" 5" not in received.split(b"\r\n", 1)[0]


def test_a_chunked_body_of_2_mib_is_413(ingest_port, hostile_figures):
    talk = Conversation(ingest_port)
    talk.send(post_head(None))
    chunk = b" " * 65_536
    for _ in range(32):
        if not talk.send(b"%x\r\n%s\r\n" % (len(chunk), chunk)):
            break
    talk.send(b"0\r\n\r\n")
    _, received, _ = talk.answer()
    note(hostile_figures, status_of(received), "http server: sizes")
    assert status_of(received) == 413, received[:300]


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /v1/requests HTTP/1.1\r\n", b"POST /v1/requests HTTP/1.1\r\nhost: ingest\r\ncontent-len"],
)
def test_headers_that_never_finish_are_408_and_the_connection_dropped(ingest_port, hostile_figures, sent):
    talk = Conversation(ingest_port)
    talk.send(sent)
    waited, received, closed = talk.answer()
    note(hostile_figures, status_of(received), "http server: slow headers")
    assert status_of(received) == 408, received[:300]
    assert closed
    assert waited < HEADER_TIMEOUT_S + 2


@pytest.mark.parametrize(
    "headers",
    [
        b"x-big: " + b"a" * 5_000 + b"\r\n",
        b"".join(b"x-h%d: v\r\n" % i for i in range(600)),
    ],
)
def test_oversized_headers_are_431(ingest_port, hostile_figures, headers):
    talk = Conversation(ingest_port)
    talk.send(post_head(len(CHAT), extra=headers) + CHAT)
    _, received, closed = talk.answer()
    note(hostile_figures, status_of(received), "http server: header size")
    assert status_of(received) == 431, received[:300]
    assert closed


def test_a_header_value_sent_forever_is_cut_at_the_header_bound(hostile_figures):
    app = create_ingest(
        IngestSettings(), producer=RecordingProducer(), check_topics=False, backlog=FakeBacklog()
    )
    # A patient header deadline: only the size bound can stop this sender within the test.
    with serving(app, HttpLimits(header_timeout_s=60, max_header_bytes=4_096)) as port:
        talk = Conversation(port)
        talk.send(b"POST /v1/requests HTTP/1.1\r\nx-endless: ")
        started = time.monotonic()
        # The server hangs up after the bound; the kernel's buffers take a while to say so.
        while talk.send(b"a" * 1_000) and time.monotonic() - started < 5:
            time.sleep(0.001)
        hung_up_after_s = time.monotonic() - started
        _, received, closed = talk.answer()
    note(hostile_figures, status_of(received), "http server: header size")
    assert closed
    assert hung_up_after_s < 5, "the server kept reading one header value for 5 s"
    assert status_of(received) in {0, 431}  # the 431 may be lost to the reset of unread bytes


def test_past_the_connection_limit_a_request_is_503_at_once(hostile_figures):
    app = create_ingest(
        IngestSettings(), producer=RecordingProducer(), check_topics=False, backlog=FakeBacklog()
    )
    limits = HttpLimits(limit_concurrency=3, header_timeout_s=5)
    with serving(app, limits) as port:
        idle = [Conversation(port) for _ in range(3)]
        time.sleep(0.1)
        talk = Conversation(port)
        talk.send(post_head(len(CHAT)) + CHAT)
        _, received, _ = talk.answer(timeout_s=2)
        for c in idle:
            c.close()
    note(hostile_figures, status_of(received), "http server: connection limit")
    assert status_of(received) == 503, received[:300]


@pytest.mark.parametrize(
    "path",
    [
        b"/v1/requests/\xff",
        b"/v1/requests/%ff%fe",
        b"/v1/requests/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        b"/v1/requests/../../etc/passwd",
        b"/v1/requests/" + b"a" * 3_000,
        b"/v1/requests/a%00b",
        b"/v1/requests/a%0d%0aset-cookie:%20x",
    ],
)
def test_results_answer_hostile_paths_below_500(results_port, hostile_figures, path):
    talk = Conversation(results_port)
    talk.send(b"GET " + path + b" HTTP/1.1\r\nhost: results\r\nconnection: close\r\n\r\n")
    _, received, _ = talk.answer()
    status = status_of(received)
    note(hostile_figures, status, "http server: results paths")
    assert 400 <= status < 500, received[:300]
    assert b"set-cookie" not in received.split(b"\r\n\r\n", 1)[0].lower()
