"""The results store's bounds: retention by age (not served, then purged), a row cap (oldest stored
first), the settings that set them, and /healthz when a background task has died."""

from __future__ import annotations

import sqlite3
import time

import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from inferq.messaging.codec import result_codec
from inferq.results.app import create_app
from inferq.results.retention import RetentionTask
from inferq.results.settings import ResultsSettings
from inferq.results.store import ResultStore
from inferq.results.table import ResultsTable
from tests.support.clock import ManualClock
from tests.support.fakes import DyingResultFeed, FakeResultFeed, a_result
from tests.support.loop import in_loop
from tests.support.waiting import eventually, wait_until

DAY_MS = 86_400_000
CODEC = result_codec()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("7d", 604_800), ("36h", 129_600), ("90m", 5_400), ("120s", 120), ("3600", 3_600), ("1.5h", 5_400)],
)
def test_retention_reads_a_duration_or_seconds(monkeypatch, text, seconds):
    monkeypatch.setenv("INFERQ_RESULTS_RETENTION", text)
    assert ResultsSettings().retention_s == seconds


def test_the_defaults_keep_a_week_and_a_million_results():
    settings = ResultsSettings()
    assert (settings.retention_s, settings.max_results) == (7 * 86_400, 1_000_000)


@pytest.mark.parametrize("text", ["7 days", "d", "-1h", "1w", "", "45s"])
def test_a_retention_that_is_not_a_duration_is_refused(text):
    with pytest.raises(ValidationError):
        ResultsSettings(retention_s=text)


@in_loop
async def test_an_expired_result_is_not_served_before_the_purge_and_is_deleted_by_it(tmp_path):
    clock = ManualClock(1_700_000_000_000)

    async with ResultStore(tmp_path / "r.db", retention_s=86_400, clock_ms=clock) as store:
        await store.put_many([a_result("old")])
        clock.advance(DAY_MS // 2)
        await store.put_many([a_result("new")])
        clock.advance(DAY_MS // 2 + 1)
        assert await store.get("default", "old") is None  # past retention: not served, still stored
        assert (await store.get("default", "new")).request_id == "new"
        assert await store.count() == 2
        assert await store.purge() == (1, 0)
        assert await store.count() == 1
        assert await store.put_many([a_result("new")]) == (0, 1)  # first result still wins


def test_the_row_cap_deletes_the_oldest_stored_first_within_the_batch(tmp_path):
    clock = ManualClock(1_700_000_000_000)
    table = ResultsTable(tmp_path / "r.db", max_rows=3, clock_ms=clock)
    for name in ("a", "b"):
        table.put_many([a_result(name)])
        clock.advance(1)
    assert table.put_many([a_result("c"), a_result("d")]) == (2, 0)
    assert table.count() == 3
    assert table.get("default", "a") is None
    assert [table.get("default", n) is not None for n in "bcd"] == [True, True, True]
    with sqlite3.connect(tmp_path / "r.db") as db:
        assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 3
    table.close()


def test_a_database_from_before_retention_gets_stored_times_from_completion(tmp_path):
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE results (request_id TEXT PRIMARY KEY, tier TEXT NOT NULL, status TEXT NOT NULL,"
            " output TEXT, error TEXT, model TEXT NOT NULL, usage TEXT, enqueued_at_ms INTEGER NOT NULL,"
            " dispatched_at_ms INTEGER, completed_at_ms INTEGER NOT NULL, attempts INTEGER NOT NULL,"
            " dispatcher_id TEXT NOT NULL)"
        )
        db.execute(
            "INSERT INTO results VALUES ('old', 'HIGH', 'OK', 'hi', NULL, 'm', NULL, 0, 10, 30, 1, 'd')"
        )
    table = ResultsTable(path, clock_ms=ManualClock(1_700_000_000_000))
    assert table.get("default", "old").output == "hi"
    assert table.purge(stored_before_ms=31) == (1, 0)
    table.close()


@in_loop
async def test_the_retention_task_purges_on_its_interval_and_stops(tmp_path):
    clock = ManualClock(1_700_000_000_000)

    async with ResultStore(tmp_path / "r.db", retention_s=60, clock_ms=clock) as store:
        await store.put_many([a_result("a")])
        clock.advance(61_000)
        task = RetentionTask(store, interval_s=0.01)
        await task.start()
        await eventually(store.count, "the store emptied", 5, interval_s=0.01, done=lambda n: n == 0)
        assert not task.failed
        await task.stop()
        await task.stop()
        assert await store.count() == 0


def test_healthz_is_503_once_the_consumer_has_died(tmp_path, caplog):
    app = create_app(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=DyingResultFeed)
    with TestClient(app) as client:
        response = wait_until(
            lambda: client.get("/healthz"), "the dead consumer reported", done=lambda r: r.status_code != 200
        )
    assert response.status_code == 503
    assert response.json() == {"status": "consumer stopped", "results": 0}
    assert "results consumer stopped; /healthz answers 503" in caplog.text


def test_a_result_past_retention_is_404_over_http(tmp_path):
    settings = ResultsSettings(db_path=tmp_path / "r.db", retention_s=60)
    stored_long_ago = ResultsTable(settings.db_path, clock_ms=lambda: time.time_ns() // 1_000_000 - 61_000)
    stored_long_ago.put_many([a_result("old")])
    stored_long_ago.close()
    feed = FakeResultFeed()
    with TestClient(create_app(settings, check_topics=False, feed=lambda: feed)) as client:
        feed.push([CODEC.encode(a_result("new"))])
        wait_until(
            lambda: client.get("/v1/requests/new").status_code, "the new result", done=lambda v: v == 200
        )
        assert client.get("/v1/requests/old").status_code == 404
