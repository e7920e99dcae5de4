"""Hostile reads of the results service, in-process: ids no request can have are 404 or 422 (and not
echoed), never a 5xx; a dead consumer makes /healthz 503."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Message

from inferq.messaging.codec import result_codec
from inferq.results.app import create_app
from inferq.results.settings import ResultsSettings
from tests.hostile.conftest import HostileFigures
from tests.support.fakes import DyingResultFeed, FakeResultFeed, a_result
from tests.support.waiting import wait_until

CODEC = result_codec()
HOSTILE_IDS = [
    "a" * 129,
    "a" * 8_000,
    "..",
    "...",
    "../../etc/passwd",
    "..%2F..%2Fetc%2Fpasswd",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "a%00b",
    "%00",
    "ü",
    "%C3%BC",
    "\N{GRINNING FACE}",
    "%ED%A0%80",
    "%FF%FE",
    "a b",
    "a%20b",
    "a\nb",
    "a%0Ab",
    "'; DROP TABLE results; --",
    "%25",
    "%zz",
    "a?b=c",
    "a#b",
    "*",
    "r1\n",
]


async def asgi_get(app: ASGIApp, path: str) -> tuple[int, bytes]:
    """GET `path` straight through the ASGI app, as uvicorn hands it over after percent-decoding
    (any text, newlines included: what an HTTP client library would refuse to send)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogatepass"),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"results")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8701),
    }
    answer: dict[str, Any] = {"body": b""}

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return answer["status"], answer["body"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    feed = FakeResultFeed()
    db = tmp_path_factory.mktemp("results") / "r.db"
    with TestClient(create_app(ResultsSettings(db_path=db), check_topics=False, feed=lambda: feed)) as c:
        feed.push([CODEC.encode(a_result("r1"))])
        wait_until(lambda: c.get("/v1/requests/r1").status_code, "the stored result", done=lambda v: v == 200)
        yield c


def get(client: TestClient, path: str, figures: HostileFigures) -> tuple[int, bytes]:
    """GET through the client's app, on the client's event loop (the one its lifespan runs on)."""
    assert client.portal is not None
    status, body = client.portal.call(asgi_get, client.app, path)
    figures.tried("http results: hostile ids")
    if status >= 500:
        figures.server_errors += 1
    return status, body


@pytest.mark.parametrize("request_id", HOSTILE_IDS)
def test_a_hostile_id_is_404_or_422_never_5xx(client, hostile_figures, request_id):
    status, _ = get(client, f"/v1/requests/{request_id}", hostile_figures)
    assert status in {404, 422}, status
    if request_id.isprintable() and request_id.isascii() and "/" not in request_id:
        assert client.get(f"/v1/requests/{request_id}").status_code in {404, 422}


def test_a_malformed_id_is_not_echoed(client, hostile_figures):
    status, body = get(client, "/v1/requests/<script>alert(1)<\\script>", hostile_figures)
    assert status == 422
    assert b"script" not in body


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request_id=st.text(min_size=1, max_size=300))
def test_any_text_as_an_id_is_answered_below_500(client, hostile_figures, request_id):
    status, _ = get(client, "/v1/requests/" + request_id, hostile_figures)
    assert status < 500, status
    # Only the stored result's own id is found.
    assert (status == 200) == (request_id == "r1")


def test_healthz_is_503_once_the_consumer_died(tmp_path, hostile_figures):
    app = create_app(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=DyingResultFeed)
    with TestClient(app) as client:
        response = wait_until(
            lambda: client.get("/healthz"), "the dead consumer reported", done=lambda r: r.status_code != 200
        )
        # Reads still work: the store is fine, only consumption stopped.
        assert client.get("/v1/requests/anything").status_code == 404
    hostile_figures.tried("http results: dead consumer")
    assert response.status_code == 503
    assert response.json()["status"] == "consumer stopped"
