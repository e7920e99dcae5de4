"""The ingest app in-process: refusals, the 202 contract, and 503 when Kafka does not answer."""

from __future__ import annotations

import time
from typing import Any

from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import AsyncProducer
from tests.support.fakes import FakeBacklog, RecordingProducer


def client(producer: AsyncProducer | None = None, **settings: Any) -> TestClient:
    app = create_app(IngestSettings(**settings), producer=producer, check_topics=False, backlog=FakeBacklog())
    return TestClient(app)


def test_accepted_request_is_written_once_with_tier_and_deadline():
    producer = RecordingProducer()
    with client(producer) as c:
        r = c.post(
            "/v1/requests",
            json={
                "scenario": "emotion_analysis",
                "session_id": "s1",
                "messages": [{"role": "user", "content": "diary"}],
            },
        )
    assert r.status_code == 202
    body = r.json()
    assert body["tier"] == "MEDIUM"
    assert body["expire_at_ms"] > time.time() * 1000 + 25_000
    [(topic, value, key)] = producer.sent
    assert topic == "inferq.requests.medium"
    assert key == b"s1"
    assert request_codec().decode(value).request_id == body["request_id"]


def test_refusals_name_the_field_and_write_nothing():
    producer = RecordingProducer()
    with client(producer) as c:
        bad_json = c.post("/v1/requests", content=b"{", headers={"content-type": "application/json"})
        no_messages = c.post("/v1/requests", json={"scenario": "realtime_chat"})
        bad_role = c.post(
            "/v1/requests", json={"scenario": "x", "messages": [{"role": "bot", "content": "y"}]}
        )
        array = c.post("/v1/requests", json=[1, 2])
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]
    assert no_messages.status_code == 422 and "messages" in no_messages.json()["error"]
    assert bad_role.status_code == 422
    assert bad_role.json()["problems"][0]["field"] == "messages.0.role"
    assert array.status_code == 400
    assert producer.sent == []


def test_unreachable_kafka_answers_503_in_bounded_time():
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # nothing listens on port 1
    with client(kafka=kafka, produce_timeout_s=1.0) as c:
        started = time.monotonic()
        r = c.post(
            "/v1/requests",
            json={"scenario": "realtime_chat", "messages": [{"role": "user", "content": "anyone?"}]},
        )
        took = time.monotonic() - started
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert took < 10, f"a client waited {took:.1f} s for a refusal"
