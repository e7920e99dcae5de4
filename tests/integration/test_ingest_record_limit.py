"""Ingest's record bound against the real broker: read from the request topics' max.message.bytes at
start-up, so a record Kafka would refuse is 413 (not 503) and never produced; and a record right at
the bound is one the real producer and broker accept (the framing margin is enough)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.record_limit import read_topics_max_message_bytes
from inferq.ingest.settings import IngestSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import Tier
from tests.support.fakes import FakeBacklog
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka


def set_topic_max_message_bytes(kafka: KafkaSettings, topic: str, size: int) -> None:
    """Set the topic's max.message.bytes and wait (bounded) until the broker reports it."""
    admin = AdminClient(kafka.admin_config())
    entry = ConfigEntry("max.message.bytes", str(size), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=15)
    wait_until(
        lambda: read_topics_max_message_bytes(kafka, [topic]),
        f"the broker reporting max.message.bytes={size}",
        15,
        interval_s=0.1,
        done=lambda v: v == size,
    )


def chat(content: str) -> dict[str, Any]:
    """A request whose messages carry `content` (split: one message holds at most 512,000 chars)."""
    half = len(content) // 2
    messages = [{"role": "user", "content": part} for part in (content[:half], content[half:])]
    return {"scenario": "realtime_chat", "session_id": "s", "messages": messages}


def written(kafka: KafkaSettings) -> int:
    return sum(end_offsets(kafka.bootstrap_servers, kafka.topics.requests(Tier.HIGH)).values())


def test_a_record_over_the_topics_limit_is_413_and_never_produced(kafka_settings):
    set_topic_max_message_bytes(kafka_settings, kafka_settings.topics.requests(Tier.MEDIUM), 100_000)
    app = create_app(IngestSettings(kafka=kafka_settings), backlog=FakeBacklog())
    with TestClient(app) as client:
        too_large = client.post("/v1/requests", json=chat("x" * 150_000))
        assert too_large.status_code == 413, too_large.text
        # The smallest limit of the request topics applies to every tier (HIGH here).
        assert "the queue takes at most 99488" in too_large.json()["error"]
        assert written(kafka_settings) == 0
        fits = client.post("/v1/requests", json=chat("x" * 90_000))
        assert fits.status_code == 202, fits.text
    assert written(kafka_settings) == 1


def test_a_record_exactly_at_the_bound_is_accepted_by_the_real_producer_and_broker(kafka_settings):
    app = create_app(IngestSettings(kafka=kafka_settings), backlog=FakeBacklog())
    with TestClient(app) as client:
        probe = client.post("/v1/requests", json=chat("y" * 1_000_000))
        assert probe.status_code == 413, probe.text
        record_bytes, limit = map(int, re.findall(r"\d+", probe.json()["error"])[:2])
        exact = 1_000_000 - (record_bytes - limit)
        one_over = client.post("/v1/requests", content=json.dumps(chat("y" * (exact + 1))))
        assert one_over.status_code == 413
        assert f"its record is {limit + 1} bytes" in one_over.json()["error"]
        at_the_bound = client.post("/v1/requests", content=json.dumps(chat("y" * exact)))
        assert at_the_bound.status_code == 202, at_the_bound.text
    assert written(kafka_settings) == 1
