"""The services as processes, driven over HTTP the way a user drives them."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import fastavro
import httpx
import pytest

from inferq import tracing
from inferq.tools.demo.workload import evening_mix, submit_all, wait_outcomes
from inferq.tools.stack.pipeline import Pipeline
from tests.support.kafka import end_offsets, read_all
from tests.support.pipeline import running_pipeline
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path_factory.mktemp("pipeline"),
        name="e2e",
        budget=4,
        backend_args=["--speed", "5"],
    ) as stack:
        yield stack


def test_mixed_workload_completes_ok_within_budget(pipeline: Pipeline) -> None:
    accepted = asyncio.run(submit_all(pipeline.ingest_url, evening_mix()))
    ids = [a["request_id"] for a in accepted]
    outcomes = asyncio.run(wait_outcomes(pipeline.results_url, ids, timeout_s=60))
    assert set(outcomes) == set(ids)
    assert {o["status"] for o in outcomes.values()} == {"OK"}
    tiers = {a["scenario"]: a["tier"] for a in accepted}
    assert tiers == {
        "morning_brief": "LOW",
        "realtime_chat": "HIGH",
        "emotion_analysis": "MEDIUM",
        "recipe_recommend": "MEDIUM",
    }
    for o in outcomes.values():
        t = o["timings"]
        assert t["queue_wait_ms"] + t["inference_ms"] == t["end_to_end_ms"]
    stats = pipeline.backend_stats()
    assert 0 < stats["max_in_flight"] <= pipeline.budget
    assert stats["by_status"].get("429", 0) == 0


def test_records_on_the_topic_decode_with_plain_fastavro(pipeline: Pipeline, kafka_bootstrap: str) -> None:
    body = {
        "scenario": "realtime_chat",
        "messages": [{"role": "user", "content": "plain avro?"}],
        "request_id": f"plain-{uuid.uuid4().hex}",
    }
    answer = httpx.post(f"{pipeline.ingest_url}/v1/requests", json=body, timeout=10).json()
    topic = f"{pipeline.topic_prefix}.requests.high"
    schema = fastavro.parse_schema(json.loads((SCHEMAS / "inference_request.avsc").read_text()))
    records = read_all(kafka_bootstrap, topic, expect=10_000, timeout_s=5)
    decoded = [fastavro.schemaless_reader(io.BytesIO(m.value()[10:]), schema) for m in records]
    mine = [d for d in decoded if d["request_id"] == answer["request_id"]]
    assert len(mine) == 1
    # A plain reader sees the message fields the schema added since (tool calls), empty.
    no_tools = {"tool_calls": None, "tool_call_id": None, "name": None}
    assert mine[0]["messages"] == [{"role": "user", "content": "plain avro?"} | no_tools]


def test_no_otel_settings_means_no_trace_headers(pipeline: Pipeline, kafka_bootstrap: str) -> None:
    """Tracing is off unless the OTEL_* environment asks for it: then ingest and the dispatcher add
    no header to what they write (the services inherit this environment)."""
    assert not tracing.configured(), "this test needs an environment without OTEL_* trace settings"
    caller = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    body = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "untraced"}]}
    answer = httpx.post(f"{pipeline.ingest_url}/v1/requests", json=body, headers=caller, timeout=10).json()
    request_id = answer["request_id"]
    outcome = asyncio.run(wait_outcomes(pipeline.results_url, [request_id], timeout_s=60))[request_id]
    assert outcome["status"] == "OK"
    key = request_id.encode()
    for topic in (f"{pipeline.topic_prefix}.requests.high", f"{pipeline.topic_prefix}.results"):
        records = read_all(kafka_bootstrap, topic, expect=10_000, timeout_s=5)
        mine = [m for m in records if request_id.encode() in (m.value() or b"") or m.key() == key]
        assert mine, f"no record of {request_id} on {topic}"
        assert [m.headers() for m in mine if m.headers()] == []


@pytest.mark.parametrize(
    ("content", "status", "named"),
    [
        (b"{not json", 400, "JSON"),
        (json.dumps({"scenario": "realtime_chat", "messages": []}).encode(), 422, "messages"),
        (json.dumps({"scenario": "realtime_chat"}).encode(), 422, "messages"),
        (
            json.dumps({"scenario": "x", "messages": [{"role": "bot", "content": "y"}]}).encode(),
            422,
            "messages.0.role",
        ),
        (
            json.dumps(
                {"scenario": "x", "messages": [{"role": "user", "content": "y"}], "priority": "NOW"}
            ).encode(),
            422,
            "priority",
        ),
        (
            json.dumps(
                {"scenario": "x", "messages": [{"role": "user", "content": "y"}], "expire_at_ms": 1000}
            ).encode(),
            422,
            "expire_at_ms",
        ),
        (
            b'{"scenario": "x", "messages": [{"role": "user", "content": "' + b"a" * 1_100_000 + b'"}]}',
            413,
            "larger",
        ),
    ],
)
def test_malformed_request_is_refused_naming_the_problem_and_adds_nothing(
    pipeline: Pipeline, kafka_bootstrap: str, content: bytes, status: int, named: str
) -> None:
    topics = [f"{pipeline.topic_prefix}.requests.{t}" for t in ("high", "medium", "low")]
    before = {t: end_offsets(kafka_bootstrap, t) for t in topics}
    response = httpx.post(
        f"{pipeline.ingest_url}/v1/requests",
        content=content,
        headers={"content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == status
    assert named in response.json()["error"]
    assert {t: end_offsets(kafka_bootstrap, t) for t in topics} == before


def test_resent_request_id_is_one_request(pipeline: Pipeline, kafka_bootstrap: str) -> None:
    rid = f"once-{uuid.uuid4().hex}"
    body = {
        "scenario": "emotion_analysis",
        "messages": [{"role": "user", "content": "same"}],
        "request_id": rid,
    }
    first = httpx.post(f"{pipeline.ingest_url}/v1/requests", json=body, timeout=10)
    second = httpx.post(f"{pipeline.ingest_url}/v1/requests", json=body, timeout=10)
    assert first.status_code == second.status_code == 202
    assert second.json()["duplicate"] is True
    outcomes = asyncio.run(wait_outcomes(pipeline.results_url, [rid], timeout_s=30))
    assert outcomes[rid]["status"] == "OK"
    from inferq.messaging.codec import request_codec

    records = read_all(
        kafka_bootstrap, f"{pipeline.topic_prefix}.requests.medium", expect=10_000, timeout_s=5
    )
    assert sum(1 for m in records if request_codec().decode(m.value()).request_id == rid) == 1


def test_every_running_service_is_ready_and_alive(pipeline: Pipeline) -> None:
    for url in (pipeline.ingest_url, pipeline.results_url, pipeline.dispatcher_url(0)):
        # A dispatcher may still be in a rebalance right after the stack started: a bounded wait.
        ready = wait_until(
            lambda url=url: httpx.get(f"{url}/readyz", timeout=5),
            f"{url} ready",
            30,
            interval_s=0.1,
            done=lambda r: r.status_code == 200,
            detail=lambda url=url: httpx.get(f"{url}/readyz", timeout=5).text,
        )
        assert ready.json() == {"status": "ready"}, url
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200, url


def test_unknown_request_id_is_404(pipeline: Pipeline) -> None:
    response = httpx.get(f"{pipeline.results_url}/v1/requests/never-sent", timeout=5)
    assert response.status_code == 404
