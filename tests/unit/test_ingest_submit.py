"""The POST handler alone, with a scripted publisher: every answer, and the refusals it counts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.errors import OverCapacityError, QueueUnavailableError
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.metrics import IngestMetrics
from inferq.ingest.record import RecordRules
from inferq.ingest.submit import SubmitEndpoint
from inferq.ingest.tenants import TenantGate
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier, TierPolicy
from inferq.messaging.topics import TopicNames
from inferq.tenancy.rate import RateLimiter
from inferq.tenancy.registry import TenantRegistry
from tests.support.fakes import FakeBacklog, InMemoryMetrics, ScriptedPublisher, labels

NOW_MS = 1_700_000_000_000
POLICY = AdmissionPolicy(capacity={Tier.HIGH: 10, Tier.MEDIUM: 10, Tier.LOW: 10})
CHAT = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}


class Harness:
    def __init__(self, max_body_bytes: int = 1_000) -> None:
        self.publisher = ScriptedPublisher()
        self.metrics = InMemoryMetrics()
        endpoint = SubmitEndpoint(
            max_body_bytes=max_body_bytes,
            body_timeout_s=5.0,
            json_guard=JsonGuard(max_depth=32, max_number_chars=40),
            rules=RecordRules(
                policy=TierPolicy(),
                deadlines_ms=DEFAULT_DEADLINES_MS,
                topics=TopicNames("inferq"),
                region="test",
                clock_ms=lambda: NOW_MS,
            ),
            publisher=self.publisher,
            metrics=IngestMetrics(self.metrics.meter, FakeBacklog(), POLICY),
            tenants=TenantGate(TenantRegistry(None), RateLimiter(lambda: 0.0), topics=TopicNames("inferq")),
        )
        app = Starlette(routes=[Route("/v1/requests", endpoint.handle, methods=["POST"])])
        self.client = TestClient(app)

    def post(self, **kwargs: Any) -> Any:
        return self.client.post("/v1/requests", **kwargs)

    def refused(self) -> dict[frozenset[tuple[str, Any]], float]:
        return self.metrics.points("inferq_ingest_refused_total")


@pytest.fixture
def harness() -> Iterator[Harness]:
    h = Harness()
    yield h
    h.metrics.shutdown()


def test_accepted_request_is_202_with_tier_deadline_and_duplicate_flag(harness):
    first = harness.post(json=CHAT | {"request_id": "r-1", "deadline_ms": 1_500})
    again = harness.post(json=CHAT | {"request_id": "r-1", "deadline_ms": 1_500})
    anonymous = harness.post(json=CHAT)
    assert first.status_code == again.status_code == anonymous.status_code == 202
    assert first.json() == {
        "request_id": "r-1",
        "tier": "HIGH",
        "expire_at_ms": NOW_MS + 1_500,
        "duplicate": False,
    }
    assert again.json()["duplicate"] is True
    # Only a client's own request_id is an idempotency key; a made-up one is not.
    keys = [key for _, key in harness.publisher.published]
    assert keys == ["r-1", "r-1", None]
    assert harness.publisher.published[2][0].request_id == anonymous.json()["request_id"]
    assert harness.publisher.published[0][0].tier is Tier.HIGH
    assert harness.refused() == {}


def test_body_over_the_limit_is_413_and_never_published(harness):
    response = harness.post(json=CHAT | {"messages": [{"role": "user", "content": "x" * 2_000}]})
    assert response.status_code == 413
    assert response.json() == {"error": "body larger than 1000 bytes"}
    assert harness.publisher.published == []
    assert harness.refused() == {labels(reason="too_large", tenant="default"): 1}


def test_malformed_and_invalid_bodies_are_400_and_422_naming_the_field(harness):
    not_json = harness.post(content=b"{", headers={"content-type": "application/json"})
    not_object = harness.post(json=[1])
    no_messages = harness.post(json={"scenario": "realtime_chat"})
    assert (not_json.status_code, not_object.status_code, no_messages.status_code) == (400, 400, 422)
    assert not_object.json() == {"error": "body must be a JSON object"}
    assert no_messages.json() == {
        "error": "invalid request: messages: Field required",
        "problems": [{"field": "messages", "problem": "Field required"}],
    }
    assert harness.publisher.published == []
    assert harness.refused() == {
        labels(reason="malformed", tenant="default"): 2,
        labels(reason="invalid", tenant="default"): 1,
    }


def test_deadline_in_the_past_is_422_on_expire_at_ms(harness):
    response = harness.post(json=CHAT | {"expire_at_ms": NOW_MS - 250})
    assert response.status_code == 422
    problem = f"expire_at_ms {NOW_MS - 250} is 250 ms ago"
    assert response.json() == {
        "error": f"invalid request: expire_at_ms: {problem}",
        "problems": [{"field": "expire_at_ms", "problem": problem}],
    }
    assert harness.refused() == {labels(reason="deadline_past", tenant="default"): 1}


def test_full_tier_is_429_with_retry_after(harness):
    refusal = POLICY.decide(Tier.LOW, {Tier.HIGH: 0, Tier.MEDIUM: 25, Tier.LOW: 0})
    assert refusal is not None
    harness.publisher.error = OverCapacityError(refusal)
    response = harness.post(json={"scenario": "morning_brief", "messages": CHAT["messages"]})
    assert response.status_code == 429
    assert response.headers["retry-after"] == str(refusal.retry_after_s)
    assert response.json() == refusal.body()
    assert response.json()["tier"] == "MEDIUM"
    assert harness.refused() == {labels(reason="over_capacity", tier="LOW", tenant="default"): 1}


def test_unacknowledged_produce_is_503_with_retry_after(harness):
    timed_out = "produce to t failed: Local: Message timed out"
    harness.publisher.error = QueueUnavailableError(Tier.HIGH, timed_out)
    response = harness.post(json=CHAT)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    # librdkafka's words are for the log: the client gets a short fixed reason.
    assert response.json() == {"error": "queue unavailable, retry later"}
    assert harness.refused() == {labels(reason="kafka_unavailable", tier="HIGH", tenant="default"): 1}
