"""``/readyz`` against the real broker: each service is ready once it has started on its topics, a
deleted topic makes ingest not ready (while it stays alive), and a dispatcher is ready in its group."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from confluent_kafka.admin import AdminClient

from inferq.dispatcher.process import metrics_app
from inferq.ingest.app import create_app as create_ingest
from inferq.ingest.settings import IngestSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.readiness import TopicsWatch
from inferq.results.app import create_app as create_results
from inferq.results.settings import ResultsSettings
from tests.support.fakes import FakeBacklog
from tests.support.inprocess import running_dispatcher, served, sim_backend
from tests.support.waiting import eventually

pytestmark = pytest.mark.kafka


def delete_topic(settings: KafkaSettings, topic: str) -> None:
    admin = AdminClient(settings.admin_config())  # held: a collected client cancels its futures
    admin.delete_topics([topic])[topic].result(15)


async def readyz_until(url: str, status: int, timeout_s: float = 30.0) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as client:
        return await eventually(
            lambda: client.get(f"{url}/readyz"),
            f"/readyz {status}",
            timeout_s,
            interval_s=0.05,
            done=lambda answer: answer.status_code == status,
        )


def test_ingest_is_ready_on_its_topics_and_not_once_one_is_deleted(kafka_settings, monkeypatch):
    monkeypatch.setenv("INFERQ_READY_CHECK_INTERVAL_S", "0.2")
    settings = IngestSettings(kafka=kafka_settings)
    reply_topic = settings.default_reply_topic

    async def scenario() -> tuple[httpx.Response, httpx.Response, int]:
        async with served(create_ingest(settings, backlog=FakeBacklog([]))) as url:
            ready = await readyz_until(url, 200)
            await asyncio.to_thread(delete_topic, kafka_settings, reply_topic)
            not_ready = await readyz_until(url, 503)
            async with httpx.AsyncClient(timeout=5) as client:
                alive = (await client.get(f"{url}/healthz")).status_code
            return ready, not_ready, alive

    ready, not_ready, alive = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert ready.json() == {"status": "ready"}
    assert not_ready.json() == {"status": "not ready", "reasons": [f"topics missing: {reply_topic}"]}
    assert alive == 200


def test_results_is_ready_once_its_consumer_joined(kafka_settings: KafkaSettings, tmp_path: Path):
    settings = ResultsSettings(
        kafka=kafka_settings, db_path=tmp_path / "r.db", group_id=kafka_settings.topic_prefix
    )

    async def scenario() -> httpx.Response:
        async with served(create_results(settings, dead_letter_producer=None)) as url:
            return await readyz_until(url, 200)

    assert asyncio.run(asyncio.wait_for(scenario(), 90)).json() == {"status": "ready"}


def test_a_dispatcher_is_ready_once_its_assignment_settled(kafka_settings: KafkaSettings):
    async def scenario() -> httpx.Response:
        watch = TopicsWatch(lambda: None, interval_s=300)
        watch.passed()
        async with sim_backend() as backend, running_dispatcher(kafka_settings, backend) as dispatcher:
            transport = httpx.ASGITransport(app=metrics_app(dispatcher, watch))
            # Ready, or a reason other than joining (the caller's assertion then shows it).
            joining = ["not in the consumer group (joining or rebalancing)"]
            async with httpx.AsyncClient(transport=transport, base_url="http://dispatcher") as client:
                return await eventually(
                    lambda: client.get("/readyz"),
                    "ready",
                    30,
                    interval_s=0.05,
                    done=lambda a: a.status_code == 200 or a.json()["reasons"] != joining,
                )

    assert asyncio.run(asyncio.wait_for(scenario(), 120)).json() == {"status": "ready"}
