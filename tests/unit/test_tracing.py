"""Kafka trace propagation (services/tracing.py): off by default, W3C headers when on, hostile headers
start a new trace instead of failing the record."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from inferq import tracing


class Acked:
    def partition(self) -> int:
        return 2

    def offset(self) -> int:
        return 41


class Recorder:
    def __init__(self) -> None:
        self.headers: list[Any] = []

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Any = None
    ) -> Acked:
        self.headers.append(headers)
        return Acked()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert tracing.setup_tracing("test", consumer_group="g", exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.shutdown()


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ],
)
def test_tracing_is_on_only_when_the_otel_environment_asks(environ: dict[str, str], on: bool) -> None:
    assert tracing.configured(environ) is on


def test_off_by_default_nothing_is_wrapped_and_no_header_is_added() -> None:
    assert not tracing.enabled()
    headers: tracing.Headers = [("inferq-kind", b"chunk")]
    assert tracing.inject(headers) is headers
    assert tracing.inject(None) is None
    assert tracing.extract([("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]) is None

    async def app(scope: Any, receive: Any, send: Any) -> None: ...

    assert tracing.traced_asgi(app) is app
    assert tracing.aiohttp_trace_configs() == []
    recorder = Recorder()
    asyncio.run(tracing.TracedProducer(recorder).produce("t", b"v", headers=None))
    assert recorder.headers == [None]


def test_a_record_carries_its_send_span_and_the_consumer_continues_the_trace(
    spans: InMemorySpanExporter,
) -> None:
    recorder = Recorder()
    producer = tracing.TracedProducer(recorder)
    tracing.MESSAGE_ID.set("req-1")
    # A caller's own traceparent is replaced, not sent twice; other headers stay.
    stale = ("traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01")
    asyncio.run(producer.produce("inferq.requests.high", b"v", headers=[("inferq-kind", b"x"), stale]))
    (headers,) = recorder.headers
    assert [k for k, _ in headers] == ["inferq-kind", "traceparent"]

    parent = tracing.extract(headers)
    assert parent is not None
    process = tracing.start_process("inferq.requests.high", 2, 41, parent, message_id="req-1")
    tracing.end_process(process)
    tracing.shutdown()
    send, consumed = spans.get_finished_spans()
    assert send.kind is SpanKind.PRODUCER and consumed.kind is SpanKind.CONSUMER
    assert send.attributes is not None and consumed.attributes is not None
    assert send.attributes["messaging.destination.partition.id"] == "2"
    assert send.attributes["messaging.kafka.offset"] == 41
    assert send.attributes["messaging.message.id"] == "req-1"
    assert consumed.context.trace_id == send.context.trace_id
    assert consumed.parent is not None and consumed.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in consumed.links] == [send.context.span_id]
    assert consumed.attributes["messaging.consumer.group.name"] == "g"
    ctx = send.context
    assert headers[1][1] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}".encode()
    assert ctx.trace_flags.sampled


@pytest.mark.parametrize(
    "value",
    [
        b"garbage",
        b"00-" + b"0" * 32 + b"-" + b"1" * 16 + b"-01",  # the all-zero trace id is invalid
        b"00-" + b"1" * 32 + b"-" + b"0" * 16 + b"-01",  # so is the all-zero span id
        b"ff-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01",  # version ff is forbidden
        b"00-" + b"1" * 31 + b"-" + b"2" * 16 + b"-01",  # too short
        b"00-" + "é".encode() * 16 + b"-" + b"2" * 16 + b"-01",  # not ASCII
        b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01" + b"x" * 100_000,  # huge
        b"",
        None,
    ],
)
def test_a_malformed_traceparent_starts_a_new_trace(spans: InMemorySpanExporter, value: bytes | None) -> None:
    headers = [("traceparent", value), ("tracestate", b"k=" + b"v" * 10_000)]
    parent = tracing.extract(headers)
    assert parent is None
    span = tracing.start_process("t", 0, 0, parent)
    assert span is not None
    tracing.end_process(span)
    tracing.shutdown()
    (done,) = spans.get_finished_spans()
    assert done.parent is None and not done.links


def test_the_process_span_is_current_once_per_request(spans: InMemorySpanExporter) -> None:
    request = object()

    def process() -> Any:
        return tracing.processing(
            request,
            topic="t",
            partition=1,
            offset=7,
            parent=None,
            message_id="r",
            attributes={"inferq.tier": "HIGH"},
        )

    with process() as outer:
        assert outer is not None
        with process() as inner:  # a step inside the call: no second span
            assert inner is None
            tracing.annotate(tracing.OUTCOME, "OK")
    tracing.shutdown()
    (done,) = spans.get_finished_spans()
    assert done.attributes is not None
    assert done.attributes["inferq.outcome"] == "OK"
    assert done.attributes["inferq.tier"] == "HIGH"


def test_the_http_instrumentations_follow_otel_python_disabled_instrumentations(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None: ...

    assert tracing.traced_asgi(app) is not app
    assert len(tracing.aiohttp_trace_configs()) == 1
    monkeypatch.setenv("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "redis, aiohttp-client,asgi")
    assert tracing.traced_asgi(app) is app
    assert tracing.aiohttp_trace_configs() == []


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER='zipkin'"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "'grpc'"),
    ],
)
def test_an_exporter_inferq_does_not_ship_stops_the_service_at_start(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], named: str
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=named):
        tracing.setup_tracing("inferq-test")
    assert not tracing.enabled()


def test_an_unsampled_request_gets_no_chat_span_and_no_http_span(spans: InMemorySpanExporter) -> None:
    from opentelemetry.instrumentation.utils import is_http_instrumentation_enabled

    unsampled = tracing.extract([("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-00")])
    assert unsampled is not None
    with tracing.processing(
        object(), topic="t", partition=0, offset=0, parent=unsampled, message_id="r", attributes={}
    ) as process:
        assert process is not None and not process.is_recording()
        with tracing.chat_span("m", "backend") as chat:
            assert chat is None
            assert not is_http_instrumentation_enabled()
        headers = tracing.inject(None)
    # The decision travels on: the outcome's record says "not sampled".
    assert headers is not None and headers[0][1].endswith(b"-00")
    with (
        tracing.processing(
            object(), topic="t", partition=0, offset=0, parent=None, message_id="r", attributes={}
        ),
        tracing.chat_span("m", "backend") as chat,
    ):
        assert chat is not None and chat.is_recording()
    tracing.shutdown()
    assert sorted(s.name for s in spans.get_finished_spans()) == ["chat m", "process t"]


def test_an_embedding_call_is_an_embeddings_span_with_its_tokens(spans: InMemorySpanExporter) -> None:
    from tests.unit.test_embedding_records import data, embedded

    with tracing.processing(
        object(), topic="t", partition=0, offset=0, parent=None, message_id="r", attributes={}
    ):
        embedded(data([1.0, 0.0], [0.5, 0.5]))
    tracing.shutdown()
    [span] = [s for s in spans.get_finished_spans() if s.name.startswith("embeddings")]
    assert span.name == "embeddings emb" and span.kind is SpanKind.CLIENT
    attributes = span.attributes or {}
    assert attributes["gen_ai.operation.name"] == "embeddings"
    assert attributes["gen_ai.usage.input_tokens"] == 9
