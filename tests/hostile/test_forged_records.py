"""A Kafka producer pretending to be another tenant, against the real broker, a real dispatcher and a
real results service (issue 23, item 3).

Before: the dispatcher believed a record's `tenant`. A principal allowed to write a request topic
could spend any tenant's share and plant a result under a victim's predictable request id, which the
victim then read as its own. Now a record must be signed (``inferq-signature``) by the tenant it
names or by a service key (``services/dispatcher/record_origin.py``).

The cases, all written straight to one partition of the HIGH topic, before tenant B's own request:

- a record naming B signed with A's record key, one unsigned, one with a garbage signature: each
  goes to the dead-letter topic with the reason; no result appears under B (GET with B's key: 404),
  the LLM is never called for them (B's share is not spent), and the partition is not blocked: B's
  own signed record behind them is answered;
- A's own record carrying the request id B is about to use: it stands as A's result only; B's GET
  of the id finds nothing until B's own request is answered, and then B's answer;
- a request through ingest (signed with the service key) runs: the check refuses only what it should;
- a record backdated by 7 days: its created_at (the result's `enqueued_at_ms`) is no earlier than
  the broker's append time less the allowed lag (5 minutes), so it jumps no queue.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from inferq.messaging import limits
from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.record_signing import SIGNATURE_HEADER
from inferq.messaging.records import InferenceRequest
from inferq.messaging.topics import TopicNames
from inferq.tools.stack.pipeline import Pipeline
from tests.hostile.conftest import HostileFigures
from tests.support.kafka import a_request, produce, read_all, use_create_time
from tests.support.pipeline import running_pipeline
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

A, B = TenantSpec.with_record_key("tenant-a"), TenantSpec.with_record_key("tenant-b")
WEEK_MS = 7 * 24 * 3_600_000


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    work_dir = tmp_path_factory.mktemp("forged-records")
    tenants_file = write_tenants(work_dir / "tenants.toml", A, B)
    with running_pipeline(
        kafka_bootstrap,
        work_dir,
        name="hforged",
        backend_args=["--speed", "50"],
        extra_env={"INFERQ_TENANTS_FILE": str(tenants_file), "INFERQ_DISPATCHER_SCHEDULE_PIN": "night"},
    ) as stack:
        yield stack


def write(pipeline: Pipeline, request: InferenceRequest, **how: Any) -> None:
    """`request` to partition 0 of the HIGH topic, keyed by its session, signed as `how` says."""
    topic = TopicNames(prefix=pipeline.topic_prefix).requests_by_name("HIGH")
    produce(pipeline.bootstrap, topic, [request_codec().encode(request)], key=b"s", partition=0, **how)


def get(pipeline: Pipeline, tenant: TenantSpec, request_id: str) -> httpx.Response:
    return httpx.get(f"{pipeline.results_url}/v1/requests/{request_id}", headers=tenant.headers(), timeout=10)


def answered(pipeline: Pipeline, tenant: TenantSpec, request_id: str) -> dict[str, Any]:
    wait_until(lambda: get(pipeline, tenant, request_id).status_code == 200, f"{request_id} answered", 60)
    body: dict[str, Any] = get(pipeline, tenant, request_id).json()
    return body


def test_records_naming_another_tenant_are_dead_lettered_and_its_own_still_run(
    pipeline: Pipeline, hostile_figures: HostileFigures
) -> None:
    calls_before = int(pipeline.backend_stats()["total"])  # type: ignore[call-overload]
    forged = a_request("HIGH", tenant=B.name)
    unsigned = a_request("HIGH", tenant=B.name)
    garbage = a_request("HIGH", tenant=B.name)
    own = a_request("HIGH", tenant=B.name)
    write(pipeline, forged, signed_with=A.record_key)
    write(pipeline, unsigned)
    write(pipeline, garbage, headers=[(SIGNATURE_HEADER, b"v1,Zm9yZ2Vk v1,!!")])
    write(pipeline, own, signed_with=B.record_key)

    assert answered(pipeline, B, own.request_id)["status"] == "OK"  # the partition is not blocked
    letters = read_all(
        pipeline.bootstrap, TopicNames(prefix=pipeline.topic_prefix).dlq, expect=3, timeout_s=60
    )
    why = {
        headers["inferq.request_id"]: headers["inferq.error"]
        for headers in ({k: (v or b"").decode() for k, v in m.headers() or []} for m in letters)
    }
    assert why == {
        forged.request_id: f"record signature does not verify for tenant '{B.name}'",
        unsigned.request_id: f"record signature missing (no {SIGNATURE_HEADER} header)",
        garbage.request_id: f"record signature does not verify for tenant '{B.name}'",
    }
    for refused in (forged, unsigned, garbage):
        assert get(pipeline, B, refused.request_id).status_code == 404  # no result planted under B
    # B's share was not spent: the LLM answered B's own request only.
    assert int(pipeline.backend_stats()["total"]) - calls_before == 1  # type: ignore[call-overload]
    hostile_figures.tried("kafka forged records", 3)


def test_a_record_of_a_with_bs_request_id_stands_as_as_result_only(
    pipeline: Pipeline, hostile_figures: HostileFigures
) -> None:
    victim_id = f"batch-{uuid.uuid4().hex[:8]}-0"  # a batch tool's id is predictable
    now_ms = int(time.time() * 1000)
    planted = a_request("HIGH", tenant=A.name, request_id=victim_id, created_at_ms=now_ms - 10_000)
    write(pipeline, planted, signed_with=A.record_key)
    assert answered(pipeline, A, victim_id)["status"] == "OK"
    assert get(pipeline, B, victim_id).status_code == 404  # A's result is not B's

    mine = a_request("HIGH", tenant=B.name, request_id=victim_id, created_at_ms=now_ms)
    write(pipeline, mine, signed_with=B.record_key)
    # Each tenant reads its own result of the id: B's is the one B asked for, A's is still A's.
    assert answered(pipeline, B, victim_id)["timings"]["enqueued_at_ms"] == mine.created_at_ms
    assert get(pipeline, A, victim_id).json()["timings"]["enqueued_at_ms"] == planted.created_at_ms
    hostile_figures.tried("kafka forged records")


def test_a_record_backdated_by_a_week_gets_a_created_at_bounded_by_the_broker(
    pipeline: Pipeline, hostile_figures: HostileFigures
) -> None:
    before_ms = int(time.time() * 1000)
    backdated = a_request(
        "HIGH", tenant=B.name, created_at_ms=before_ms - WEEK_MS + 60_000, expire_at_ms=before_ms + 60_000
    )
    write(pipeline, backdated, signed_with=B.record_key)
    result = answered(pipeline, B, backdated.request_id)
    assert result["status"] == "OK"
    # Appended after `before_ms`: created_at is raised to at least the append time less the lag.
    assert result["timings"]["enqueued_at_ms"] >= before_ms - limits.MAX_APPEND_LAG_MS
    hostile_figures.tried("kafka forged records")


def test_the_request_topics_stamp_the_append_time(pipeline: Pipeline) -> None:
    """What the bound stands on: the broker, not the producer, sets the request topics' timestamps."""
    topic = TopicNames(prefix=pipeline.topic_prefix).requests_by_name("HIGH")
    [first, *_] = read_all(pipeline.bootstrap, topic, timeout_s=30)
    timestamp_type, _ = first.timestamp()
    assert timestamp_type == TIMESTAMP_LOG_APPEND_TIME


def test_a_request_through_ingest_is_signed_by_ingest_and_runs(
    pipeline: Pipeline, hostile_figures: HostileFigures
) -> None:
    """The other side of the check: ingest signs with the file's service key, which verifies for
    any tenant (the real processes, the real file)."""
    body = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}
    accepted = httpx.post(f"{pipeline.ingest_url}/v1/requests", json=body, headers=B.headers(), timeout=10)
    assert accepted.status_code == 202, accepted.text
    assert answered(pipeline, B, accepted.json()["request_id"])["status"] == "OK"
    hostile_figures.tried("kafka forged records")


def test_topics_create_sets_log_append_time_on_an_existing_request_topic(kafka_bootstrap: str) -> None:
    """A pipeline made before request topics were LogAppendTime: `inferq topics create` run again
    sets it (what the docs tell an operator to do)."""
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"hts{uuid.uuid4().hex[:10]}")
    high = settings.topics.requests_by_name("HIGH")
    create_topics(settings)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def timestamp_type() -> str:
        resource = ConfigResource(ResourceType.TOPIC, high)
        configs = admin.describe_configs([resource])[resource].result(timeout=15)
        return str(configs["message.timestamp.type"].value)

    assert timestamp_type() == "LogAppendTime"
    use_create_time(kafka_bootstrap, [high])

    outcome = create_topics(settings)
    assert outcome[high] == "exists (message.timestamp.type set to LogAppendTime)"
    wait_until(
        lambda: timestamp_type() == "LogAppendTime", "the topic back on LogAppendTime", 30, interval_s=0.2
    )
