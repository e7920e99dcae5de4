"""Ingest's composition root: parts built from settings without touching Kafka, started in dependency
order and stopped in the reverse order, also when a start fails half-way."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import bootstrap, create_app, serve_parts
from inferq.ingest.settings import IngestSettings
from inferq.messaging.kafka_config import KafkaSettings
from tests.support.fakes import FakeBacklog, RecordingProducer


class BrokenBacklog(FakeBacklog):
    async def start(self) -> None:
        self.events.append("backlog.start")
        raise RuntimeError("cannot reach the group coordinator")


def librdkafka_threads() -> int:
    """The process's librdkafka threads ("rdk:main", "rdk:broker-N"...): other tests' threads ending
    or starting meanwhile do not count."""
    return sum(comm.read_text().startswith("rdk:") for comm in Path("/proc/self/task").glob("*/comm"))


def test_building_the_parts_starts_no_client():
    before = librdkafka_threads()
    parts = bootstrap(IngestSettings(kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1")))
    # librdkafka starts its threads with a client: none may exist before the lifespan runs.
    assert librdkafka_threads() == before
    assert parts.admission.enabled and not parts.watcher.running


def test_parts_start_in_order_and_stop_in_reverse():
    events: list[str] = []
    parts = bootstrap(
        IngestSettings(), producer=RecordingProducer(events), backlog=FakeBacklog(events, HIGH=0)
    )

    async def scenario() -> None:
        async with serve_parts(parts, check_topics=False):
            assert events == ["producer.start", "backlog.start"]
            assert parts.watcher.running
        assert not parts.watcher.running

    asyncio.run(scenario())
    assert events == ["producer.start", "backlog.start", "backlog.stop", "producer.stop"]


def test_a_failed_start_stops_what_already_started():
    events: list[str] = []
    parts = bootstrap(IngestSettings(), producer=RecordingProducer(events), backlog=BrokenBacklog(events))

    async def scenario() -> None:
        async with serve_parts(parts, check_topics=False):
            pytest.fail("served although the backlog reader did not start")

    with pytest.raises(RuntimeError, match="group coordinator"):
        asyncio.run(scenario())
    assert events == ["producer.start", "backlog.start", "producer.stop"]
    assert not parts.watcher.running


def test_the_app_lifespan_runs_the_parts():
    events: list[str] = []
    app = create_app(
        IngestSettings(),
        producer=RecordingProducer(events),
        check_topics=False,
        backlog=FakeBacklog(events),
    )
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert events == ["producer.start", "backlog.start"]
    assert events[2:] == ["backlog.stop", "producer.stop"]
