"""One trace per request across ingest, the dispatcher and results, run as processes exporting OTLP
to a receiver started here (the standard OTEL_* variables, nothing inferq-specific)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import Producer

from inferq.messaging.codec import request_codec
from inferq.tools.demo.workload import wait_outcomes
from inferq.tools.otlp_sink import OtlpSink, ReceivedSpan
from inferq.tools.stack.pipeline import Pipeline
from tests.support.kafka import a_request, read_all
from tests.support.pipeline import running_pipeline
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def sink() -> Iterator[OtlpSink]:
    with OtlpSink() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def pipeline(
    kafka_bootstrap: str, sink: OtlpSink, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path_factory.mktemp("traced"),
        name="e2etr",
        budget=4,
        backend_args=["--speed", "5"],
        extra_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
            "OTEL_TRACES_SAMPLER": "always_on",
            # Export within a fraction of a second instead of every 5 s.
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    ) as stack:
        yield stack


def _submit(pipeline: Pipeline, scenario: str, headers: dict[str, str] | None = None) -> str:
    body = {"scenario": scenario, "messages": [{"role": "user", "content": "trace me"}]}
    answer = httpx.post(f"{pipeline.ingest_url}/v1/requests", json=body, headers=headers, timeout=10)
    assert answer.status_code == 202, answer.text
    request_id: str = answer.json()["request_id"]
    return request_id


def _trace_of(spans: list[ReceivedSpan], request_id: str) -> list[ReceivedSpan]:
    """Every span of the trace the request's ingest send span belongs to."""
    sends = [
        s
        for s in spans
        if s.service == "inferq-ingest" and s.attributes.get("messaging.message.id") == request_id
    ]
    if len(sends) != 1:
        return []
    return [s for s in spans if s.trace_id == sends[0].trace_id]


def _written(trace: list[ReceivedSpan]) -> bool:
    """Whether a stored result's span has come and, with it, the span that wrote the result. The
    dispatcher's process span ends only once the result's produce is acknowledged, after the record
    is readable: the results service can store it and export its span first, and a check made then
    would miss the process span (and the chat and HTTP spans the same export carries: they end
    before it, in the same process)."""
    ids = {s.span_id for s in trace}
    stored = [s for s in trace if s.service == "inferq-results" and s.kind == CONSUMER]
    return bool(stored) and all(s.parent_span_id in ids for s in stored)


def _complete(trace: list[ReceivedSpan]) -> bool:
    """Every span the assertions read has come: ingest's (its server span ends after its send span)
    and the dispatcher's with the result's."""
    return _written(trace) and any(s.kind == SERVER for s in trace)


def _assert_connected(trace: list[ReceivedSpan], *, root_parent: str = "") -> None:
    """One tree: a single root (whose parent is the caller's span, if any), every other span's parent
    in the trace."""
    ids = {s.span_id for s in trace}
    roots = [s for s in trace if s.parent_span_id not in ids]
    assert [(r.name, r.parent_span_id) for r in roots] == [(roots[0].name, root_parent)]
    assert roots[0].kind == SERVER and roots[0].service == "inferq-ingest"


def test_one_connected_trace_per_request_across_the_three_services(
    pipeline: Pipeline, sink: OtlpSink
) -> None:
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    ids = [_submit(pipeline, "realtime_chat", caller)] + [
        _submit(pipeline, s) for s in ("realtime_chat", "emotion_analysis", "morning_brief")
    ]
    outcomes = asyncio.run(wait_outcomes(pipeline.results_url, ids, timeout_s=60))
    assert {o["status"] for o in outcomes.values()} == {"OK"}

    spans = sink.wait_for(lambda got: all(_complete(_trace_of(got, i)) for i in ids), timeout_s=60)
    traces = {i: _trace_of(spans, i) for i in ids}
    assert len({t[0].trace_id for t in traces.values()}) == len(ids), "one trace per request"
    # The caller's trace goes on: its trace id, the ingest span a child of the caller's span.
    assert traces[ids[0]][0].trace_id == CALLER_TRACE
    for request_id, trace in traces.items():
        _assert_connected(trace, root_parent=CALLER_SPAN if request_id == ids[0] else "")
        by_kind = {(s.service, s.kind) for s in trace}
        assert {
            ("inferq-ingest", SERVER),
            ("inferq-ingest", PRODUCER),
            ("inferq-dispatcher", CONSUMER),
            ("inferq-dispatcher", CLIENT),
            ("inferq-results", CONSUMER),
        } <= by_kind
        (send,) = [s for s in trace if s.kind == PRODUCER]
        assert send.service == "inferq-ingest"
        assert (
            send.attributes["messaging.destination.name"]
            == f"{pipeline.topic_prefix}.requests.{outcomes[request_id]['tier'].lower()}"
        )
        (process,) = [s for s in trace if s.service == "inferq-dispatcher" and s.kind == CONSUMER]
        assert process.attributes["messaging.system"] == "kafka"
        # Ingest's record → the dispatcher → the result record → the results service.
        assert process.parent_span_id == send.span_id
        assert process.links == ((send.trace_id, send.span_id),)
        assert process.attributes["messaging.destination.name"].startswith(
            f"{pipeline.topic_prefix}.requests."
        )
        assert process.attributes["messaging.message.id"] == request_id
        assert isinstance(process.attributes["messaging.kafka.offset"], int)
        assert process.attributes["messaging.destination.partition.id"].isdigit()
        assert process.attributes["inferq.tier"] == outcomes[request_id]["tier"]
        assert process.attributes["inferq.queue_wait_seconds"] >= 0
        assert process.attributes["inferq.outcome"] == "OK"
        (chat,) = [s for s in trace if s.name.startswith("chat ")]
        assert chat.parent_span_id == process.span_id
        assert chat.attributes["gen_ai.request.model"] == outcomes[request_id]["model"]
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"] == ["stop"]
        # The backend call itself, from the aiohttp instrumentation, under the chat span.
        http = [s for s in trace if s.kind == CLIENT and s.parent_span_id == chat.span_id]
        assert len(http) == 1
        assert http[0].attributes.get("http.request.method", http[0].attributes.get("http.method")) == "POST"
        (stored,) = [s for s in trace if s.service == "inferq-results"]
        assert stored.attributes["messaging.message.id"] == request_id
        assert stored.parent_span_id == process.span_id
        assert stored.attributes["messaging.destination.name"] == f"{pipeline.topic_prefix}.results"


def test_a_retried_request_is_one_trace_with_its_attempts_linked(pipeline: Pipeline, sink: OtlpSink) -> None:
    backend = pipeline.backend_url
    # The outage's 503 says Retry-After: 1, so the retry comes a second later at the soonest: the
    # outage is over by then (it ends as soon as the first 503 is seen).
    httpx.post(f"{backend}/admin/reset", timeout=5).raise_for_status()
    httpx.post(f"{backend}/admin/faults", json={"outage": True}, timeout=5).raise_for_status()
    try:
        request_id = _submit(pipeline, "emotion_analysis")
        wait_until(
            lambda: httpx.get(f"{backend}/stats", timeout=5).json()["by_status"].get("503", 0),
            "the backend never saw the call",
            30,
            interval_s=0.05,
        )
    finally:
        httpx.post(f"{backend}/admin/faults", json={"outage": False}, timeout=5).raise_for_status()
    outcome = asyncio.run(wait_outcomes(pipeline.results_url, [request_id], timeout_s=60))[request_id]
    assert outcome["status"] == "OK"
    assert outcome["attempts"] >= 2

    spans = sink.wait_for(lambda got: _complete(_trace_of(got, request_id)), timeout_s=60)
    trace = _trace_of(spans, request_id)
    _assert_connected(trace)
    attempts = sorted(
        (s for s in trace if s.service == "inferq-dispatcher" and s.kind == CONSUMER),
        key=lambda s: s.attributes["inferq.attempt"],
    )
    assert [s.attributes["inferq.attempt"] for s in attempts] == list(range(1, outcome["attempts"] + 1))
    assert {s.attributes["inferq.outcome"] for s in attempts[:-1]} == {"RETRY"}
    assert attempts[-1].attributes["inferq.outcome"] == "OK"
    for earlier, later in itertools.pairwise(attempts):
        assert later.attributes["messaging.destination.name"] == f"{pipeline.topic_prefix}.retry"
        # The retry record carried the earlier attempt's context: a child of it, and linked to it.
        assert later.links == ((earlier.trace_id, earlier.span_id),)
        assert later.parent_span_id == earlier.span_id
    failed_chat = [s for s in trace if s.name.startswith("chat ") and s.status_code == 2]
    assert failed_chat and failed_chat[0].attributes["error.type"] == "503"
    # The retry record carried the trace in its headers.
    retries = read_all(pipeline.bootstrap, f"{pipeline.topic_prefix}.retry", expect=10_000, timeout_s=5)
    mine = [m for m in retries if m.key() == request_id.encode()]
    assert mine
    for record in mine:
        traceparent = dict(record.headers() or [])["traceparent"].decode()
        assert traceparent.split("-")[1] == trace[0].trace_id


def test_a_record_written_straight_to_kafka_keeps_its_trace_through_the_chunks(
    pipeline: Pipeline, sink: OtlpSink
) -> None:
    """A producer that bypasses ingest sets `traceparent` itself; a streamed answer's chunks and its
    result carry the trace on to the results service."""
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    request = a_request("HIGH", tenant="default", stream=True)
    producer = Producer({"bootstrap.servers": pipeline.bootstrap})
    producer.produce(
        f"{pipeline.topic_prefix}.requests.high",
        value=request_codec().encode(request),
        key=request.request_id.encode(),
        headers=[("traceparent", f"00-{trace_id}-{span_id}-01".encode())],
    )
    assert producer.flush(15) == 0
    outcome = asyncio.run(wait_outcomes(pipeline.results_url, [request.request_id], timeout_s=60))
    assert outcome[request.request_id]["status"] == "OK"

    replies = [
        message
        for topic in (f"{pipeline.topic_prefix}.results", f"{pipeline.topic_prefix}.chunks")
        for message in read_all(pipeline.bootstrap, topic)
    ]
    mine = [m for m in replies if m.key() == request.request_id.encode()]
    kinds = [dict(m.headers() or []).get("inferq-kind") for m in mine]
    assert b"chunk" in kinds and None in kinds, "chunks and the result"
    for record in mine:
        assert dict(record.headers() or [])["traceparent"].decode().split("-")[1] == trace_id

    def done(spans: list[ReceivedSpan]) -> bool:
        return _written([s for s in spans if s.trace_id == trace_id])

    trace = [s for s in sink.wait_for(done, timeout_s=60) if s.trace_id == trace_id]
    (process,) = [s for s in trace if s.service == "inferq-dispatcher" and s.kind == CONSUMER]
    assert process.parent_span_id == span_id
    assert process.attributes["messaging.message.id"] == request.request_id
    (stored,) = [s for s in trace if s.service == "inferq-results"]
    assert stored.parent_span_id == process.span_id
