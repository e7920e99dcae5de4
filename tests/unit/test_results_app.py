"""The results service in-process: a fake reply-topic feed, the real SQLite store, answers over HTTP."""

from __future__ import annotations

import threading

from starlette.testclient import TestClient

from inferq.messaging.codec import result_codec
from inferq.results.app import create_app
from inferq.results.settings import ResultsSettings
from inferq.results.store import WORKER_THREAD_NAME
from inferq.results.view import public_view
from tests.support.fakes import FakeResultFeed, GatedFeed, a_result
from tests.support.waiting import wait_until

CODEC = result_codec()


def test_results_are_served_once_stored_and_the_first_one_wins(tmp_path):
    events: list[str] = []
    feed = FakeResultFeed(events=events)
    app = create_app(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: feed)
    with TestClient(app) as client:
        assert client.get("/v1/requests/a").status_code == 404
        feed.push([CODEC.encode(a_result("a")), CODEC.encode(a_result("b", status="FAILED"))])
        found = wait_until(
            lambda: client.get("/v1/requests/a"), "result a", done=lambda r: r.status_code == 200
        )
        assert found.json() == public_view(a_result("a"))
        feed.push([CODEC.encode(a_result("a", status="FAILED", completed_at_ms=99))])
        wait_until(lambda: feed.handed_out, "the duplicate read", done=lambda v: v == 2)
        assert client.get("/v1/requests/a").json()["status"] == "OK"
        assert client.get("/v1/requests/b").json()["status"] == "FAILED"
        assert client.get("/healthz").json() == {"status": "ok", "results": 2}
    assert events == ["feed.start", "feed.stop"]
    assert not any(t.name.startswith(WORKER_THREAD_NAME) for t in threading.enumerate())


def test_unknown_request_id_is_404_naming_it(tmp_path):
    app = create_app(
        ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: FakeResultFeed()
    )
    with TestClient(app) as client:
        response = client.get("/v1/requests/never-sent")
    assert response.status_code == 404
    assert response.json() == {"error": "no result for request_id 'never-sent' (yet)"}


def test_results_survive_a_restart(tmp_path):
    settings = ResultsSettings(db_path=tmp_path / "r.db")
    feed = FakeResultFeed()
    with TestClient(create_app(settings, check_topics=False, feed=lambda: feed)) as client:
        feed.push([CODEC.encode(a_result("a"))])
        wait_until(lambda: client.get("/v1/requests/a").status_code, "result a", done=lambda v: v == 200)
    with TestClient(create_app(settings, check_topics=False, feed=lambda: FakeResultFeed())) as client:
        assert client.get("/v1/requests/a").json() == public_view(a_result("a"))


def test_healthz_says_starting_until_the_feed_has_started(tmp_path):
    feed = GatedFeed()
    app = create_app(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: feed)
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "starting", "results": 0}
        feed.gate.set()
        wait_until(lambda: client.get("/healthz").json()["status"], "consuming", done=lambda v: v == "ok")
