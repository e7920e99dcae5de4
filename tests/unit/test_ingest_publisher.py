"""The publisher alone (admission + idempotency + produce) with fake producers and a fake backlog."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.backlog import BacklogSnapshot
from inferq.ingest.backlog_watch import BacklogAlarm
from inferq.ingest.errors import OverCapacityError, QueueUnavailableError
from inferq.ingest.idempotency import IdempotencyCache
from inferq.ingest.metrics import IngestMetrics
from inferq.ingest.publisher import Publisher
from inferq.ingest.record import RecordRules, submitted_record
from inferq.ingest.record_limit import RecordLimit
from inferq.ingest.tenant_shares import BacklogShares
from inferq.ingest.validation import SubmitRequest
from inferq.messaging.codec import request_codec
from inferq.messaging.producer import ProduceError
from inferq.messaging.record_signing import SIGNATURE_HEADER, hmac_key, verify
from inferq.messaging.records import InferenceRequest
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier, TierPolicy
from inferq.messaging.topics import TopicNames
from inferq.tenancy.registry import TenantRegistry
from inferq.tools.stack.tenants import SERVICE_RECORD_KEY, TenantSpec, write_tenants
from tests.support.fakes import (
    FakeBacklog,
    InMemoryMetrics,
    RecordingProducer,
    RefusingProducer,
    SilentProducer,
    labels,
)

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
POLICY = AdmissionPolicy(capacity={H: 10, M: 10, L: 10})
RULES = RecordRules(
    policy=TierPolicy(),
    deadlines_ms=DEFAULT_DEADLINES_MS,
    topics=TopicNames("inferq"),
    region="test",
    clock_ms=lambda: 1_700_000_000_000,
)


def record(scenario: str = "realtime_chat", **fields: Any) -> InferenceRequest:
    body = {"scenario": scenario, "messages": [{"role": "user", "content": "hi"}], "session_id": "s"}
    return submitted_record(SubmitRequest.model_validate(body | fields), RULES)


class Parts:
    def __init__(
        self,
        producer: RecordingProducer | None = None,
        ack_timeout_s: float = 5.0,
        backlog: FakeBacklog | None = None,
        tenants: TenantRegistry | None = None,
        **lags: int,
    ):
        self.producer = producer or RecordingProducer()
        self.backlog = backlog or FakeBacklog(**({"HIGH": 0, "MEDIUM": 0, "LOW": 0} | lags))
        self.metrics = InMemoryMetrics()
        self.publisher = Publisher(
            producer=self.producer,
            topics=TopicNames("inferq"),
            codec=request_codec(),
            backlogs=self.backlog,
            admission=POLICY,
            alarm=BacklogAlarm(POLICY, alert_ratio=0.7),
            recent_ids=IdempotencyCache(100),
            metrics=IngestMetrics(self.metrics.meter, self.backlog, POLICY),
            ack_timeout_s=ack_timeout_s,
            record_limit=RecordLimit(1_000_000, topics_max_bytes=lambda: None),
            tenants=tenants or TenantRegistry(None),
            shares=BacklogShares(POLICY),
        )

    def publish(self, request: InferenceRequest, key: str | None = None) -> tuple[dict[str, Any], bool]:
        return asyncio.run(self.publisher.publish(request, idempotency_key=key))

    def accepted(self) -> dict[frozenset[tuple[str, Any]], float]:
        return self.metrics.points("inferq_ingest_accepted_total")


def test_an_admitted_request_is_produced_keyed_by_session_and_counted():
    parts = Parts()
    request = record("emotion_analysis")
    answer, replayed = parts.publish(request)
    assert (answer, replayed) == (
        {"request_id": request.request_id, "tier": "MEDIUM", "expire_at_ms": request.expire_at_ms},
        False,
    )
    [(topic, value, key)] = parts.producer.sent
    assert (topic, key) == ("inferq.requests.medium", b"s")
    assert request_codec().decode(value) == request
    assert parts.accepted() == {labels(tier="MEDIUM", tenant="default"): 1}


def test_a_resent_key_is_answered_from_memory_without_a_second_record():
    parts = Parts()
    request = record(request_id="r-1")

    async def resend_concurrently() -> list[tuple[dict[str, Any], bool]]:
        resends = (parts.publisher.publish(request, idempotency_key="r-1") for _ in range(3))
        return list(await asyncio.gather(*resends))

    answers = asyncio.run(resend_concurrently())
    assert [replayed for _, replayed in answers] == [False, True, True]
    assert len({a["request_id"] for a, _ in answers}) == 1
    assert len(parts.producer.sent) == 1
    assert parts.accepted() == {labels(tier="HIGH", tenant="default"): 1}


def test_a_full_tier_is_refused_unwritten_and_the_refusal_is_forgotten():
    parts = Parts(HIGH=10)
    request = record(request_id="r-2")
    with pytest.raises(OverCapacityError) as refused:
        parts.publish(request, key="r-2")
    assert refused.value.refusal.full_tier is H
    assert refused.value.tier is H
    assert parts.producer.sent == []
    parts.backlog.lags[H] = 0
    assert parts.publish(request, key="r-2")[1] is False  # weighed afresh, not replayed as a refusal
    assert len(parts.producer.sent) == 1


def test_a_full_tier_refuses_the_flooding_tenant_and_admits_one_below_its_share(tmp_path: Path):
    path = write_tenants(tmp_path / "t.toml", TenantSpec("flood"), TenantSpec("quiet", weight=3))
    registry = TenantRegistry(path)
    registry.load()
    parts = Parts(tenants=registry)
    for _ in range(9):
        parts.publish(record(tenant="flood"))
    parts.publish(record(tenant="quiet"))
    parts.backlog.lags[H] = 10  # the tier is full (capacity 10), nearly all of it the flood's
    with pytest.raises(OverCapacityError):
        parts.publish(record(tenant="flood"))
    parts.publish(record(tenant="quiet"))  # 1 of the last 10 is its: below its share (7.5)
    tenants = [request_codec().decode(value).tenant for _, value, _ in parts.producer.sent]
    assert tenants == ["flood"] * 9 + ["quiet"] * 2  # the refused flood request was never written


class PeriodicBacklog(FakeBacklog):
    """A backlog source that, like the Kafka reader, serves one snapshot until its next `read`."""

    def __init__(self, **lags: int | None) -> None:
        super().__init__(**lags)
        self.read()

    def read(self) -> None:
        self._snapshot = FakeBacklog.snapshot(self)

    def snapshot(self) -> BacklogSnapshot:
        return self._snapshot


def test_admission_counts_its_own_admissions_since_the_last_backlog_read():
    backlog = PeriodicBacklog(HIGH=7, MEDIUM=0, LOW=0)
    parts = Parts(backlog=backlog)
    for _ in range(3):
        parts.publish(record())
    # Capacity 10: the lag read said 7, and this ingest has since added 3. No new read came.
    with pytest.raises(OverCapacityError) as refused:
        parts.publish(record())
    assert (refused.value.refusal.full_tier, refused.value.refusal.backlog) == (H, 10)
    # LOW yields to the full HIGH tier as well; MEDIUM answers for itself and gets in.
    with pytest.raises(OverCapacityError):
        parts.publish(record("morning_brief"))
    assert parts.publish(record("emotion_analysis"))[0]["tier"] == "MEDIUM"
    assert len(parts.producer.sent) == 4
    # The next read shows the dispatchers' progress: the count starts again from it.
    backlog.lags[H] = 2
    backlog.read()
    for _ in range(8):
        parts.publish(record())
    with pytest.raises(OverCapacityError):
        parts.publish(record())


class HeldProducer(RecordingProducer):
    """Acknowledges nothing until `ack` is set (`held` records wait for it); fails every record
    when `fail` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.ack = asyncio.Event()
        self.fail = False
        self.held = 0

    async def produce(self, topic: str, value: bytes, *, key: bytes | None = None, **_: Any) -> Any:
        self.held += 1
        await asyncio.wait_for(self.ack.wait(), 5)
        self.held -= 1
        if self.fail:
            raise ProduceError(topic, "Local: Message timed out")
        return await super().produce(topic, value, key=key)


def test_requests_admitted_concurrently_count_against_each_other_and_a_failed_one_is_taken_back():
    producer = HeldProducer()
    parts = Parts(producer=producer, backlog=PeriodicBacklog(HIGH=7, MEDIUM=0, LOW=0))

    async def burst(n: int) -> list[object]:
        sends = [
            asyncio.ensure_future(parts.publisher.publish(record(), idempotency_key=None)) for _ in range(n)
        ]
        # Every send admitted (its record held) or refused before any acknowledgement.
        async with asyncio.timeout(5):
            while producer.held != sum(not s.done() for s in sends):
                await asyncio.sleep(0)
        producer.ack.set()
        return await asyncio.gather(*sends, return_exceptions=True)

    # Capacity 10, lag 7: of 6 sends in flight together only 3 fit.
    producer.fail = True
    failed = asyncio.run(burst(6))
    assert (
        sorted(type(r).__name__ for r in failed) == ["OverCapacityError"] * 3 + ["QueueUnavailableError"] * 3
    )
    # The 3 that were not written no longer count: 3 fit again, no new read needed.
    producer.ack, producer.fail = asyncio.Event(), False
    written = asyncio.run(burst(6))
    assert sorted(type(r).__name__ for r in written) == ["OverCapacityError"] * 3 + ["tuple"] * 3
    assert len(producer.sent) == 3


def test_admission_counting_its_own_admissions_never_refuses_on_an_unknown_backlog():
    parts = Parts(backlog=PeriodicBacklog(HIGH=None, MEDIUM=None, LOW=None))
    for _ in range(25):
        parts.publish(record())
    assert len(parts.producer.sent) == 25


def test_low_is_shed_while_another_tier_is_full():
    parts = Parts(MEDIUM=10)
    with pytest.raises(OverCapacityError) as refused:
        parts.publish(record("morning_brief"))
    assert (refused.value.tier, refused.value.refusal.full_tier) == (L, M)
    assert parts.publish(record("realtime_chat"))[0]["tier"] == "HIGH"


def test_a_refused_record_is_queue_unavailable_and_retriable(caplog):
    caplog.set_level(logging.WARNING, logger="inferq.ingest")
    producer = RefusingProducer()
    parts = Parts(producer)
    request = record(request_id="r-3")
    for _ in range(2):
        with pytest.raises(QueueUnavailableError) as failed:
            parts.publish(request, key="r-3")
    error = failed.value
    assert (error.tier, error.retriable) == (H, True)
    assert isinstance(error.__cause__, ProduceError)
    assert error.detail == "produce to inferq.requests.high failed: Local: Message timed out"
    assert producer.attempts == 2  # a failure is not remembered: the resend tried again
    assert parts.accepted() == {}
    assert "produce failed, answering 503: produce to inferq.requests.high" in caplog.text


def test_an_unacknowledged_record_times_out_after_the_ack_timeout():
    parts = Parts(SilentProducer(), ack_timeout_s=0.05)
    started = time.monotonic()
    with pytest.raises(QueueUnavailableError) as failed:
        parts.publish(record())
    assert time.monotonic() - started < 2.0
    assert isinstance(failed.value.__cause__, TimeoutError)
    assert str(failed.value) == "queue unavailable, retry later"


def test_admission_feeds_the_alarm(caplog):
    caplog.set_level(logging.WARNING, logger="inferq.ingest")
    parts = Parts(HIGH=8)
    parts.publish(record())
    parts.publish(record())
    [alert] = [r.getMessage() for r in caplog.records if r.name == "inferq.ingest"]
    assert alert.startswith("tier HIGH backlog above 70% of capacity (backlog 8, capacity 10)")


class HeaderRecordingProducer(RecordingProducer):
    def __init__(self) -> None:
        super().__init__()
        self.headers: list[Any] = []

    async def produce(self, topic: str, value: bytes, *, key: bytes | None = None, **kwargs: Any) -> Any:
        self.headers.append(kwargs.get("headers"))
        return await super().produce(topic, value, key=key)


def test_each_record_is_signed_with_the_files_service_key_and_open_mode_signs_none(tmp_path: Path) -> None:
    path = write_tenants(tmp_path / "t.toml", TenantSpec("acme"))
    registry = TenantRegistry(path)
    registry.load()
    parts = Parts(producer=HeaderRecordingProducer(), tenants=registry)
    parts.publish(record(tenant="acme"))
    [(_, value, key)] = parts.producer.sent
    [[(name, signature)]] = parts.producer.headers  # type: ignore[attr-defined]
    assert name == SIGNATURE_HEADER
    assert verify(signature, [hmac_key(SERVICE_RECORD_KEY)], key, value)

    open_mode = Parts(producer=HeaderRecordingProducer())
    open_mode.publish(record())
    assert open_mode.producer.headers == [[]]  # type: ignore[attr-defined]
