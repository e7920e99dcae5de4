"""Traces: one per request, from the caller's HTTP request through Kafka to the stored result.

W3C trace context (``traceparent``, ``tracestate``) comes from the caller's HTTP headers, or a
trace starts at ingest (or, for a record a producer wrote straight to Kafka, at the dispatcher),
and travels in Kafka record headers through the request, retry and reply topics (chunks too):

    ingest    SERVER  POST /v1/requests            (opentelemetry-instrumentation-asgi)
              PRODUCER  send <request topic>       traceparent into the record's headers
    dispatcher CONSUMER process <request topic>    child of the record's context and linked to it;
                                                   inferq.queue_wait_seconds, inferq.tier,
                                                   inferq.attempt, inferq.outcome; the outcome's
                                                   record (reply, retry, chunk) carries its context
              CLIENT    chat <model>               gen_ai.* (model, tokens, finish reason)
                CLIENT    POST                     (opentelemetry-instrumentation-aiohttp-client)
    results   CONSUMER process <reply topic>       ends once the result is stored

A retried request is one trace: the retry record carries the context of the attempt's process
span, so the next attempt's process span is its child and links to it.

Configuration is OpenTelemetry's own environment: tracing is on when ``OTEL_TRACES_EXPORTER`` names
an exporter (``otlp``: OTLP over HTTP/protobuf, ``console``: JSON lines on stdout) or an OTLP
endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); the
sampler (``OTEL_TRACES_SAMPLER``), the service name (``OTEL_SERVICE_NAME``), the batch processor
(``OTEL_BSP_*``) and the propagators (``OTEL_PROPAGATORS``) are read by the SDK as usual. With none
of them set nothing is installed: the tracer provider is the API's no-op one, no middleware wraps
the HTTP apps, no trace config is given to aiohttp and no header is added to any record, so tracing
off costs nothing but a check of one module variable per hook.

Only the Kafka propagation is written here; the HTTP sides use the maintained instrumentation.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Protocol

import aiohttp
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.attributes import messaging_attributes as messaging
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp

log = logging.getLogger("inferq.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
KAFKA = "kafka"
# inferq's own span attributes (no semantic convention covers them).
QUEUE_WAIT_SECONDS = "inferq.queue_wait_seconds"
TIER = "inferq.tier"
ATTEMPT = "inferq.attempt"
OUTCOME = "inferq.outcome"

HeaderValue = str | bytes | None
Headers = list[tuple[str, HeaderValue]]

_tracer: trace.Tracer | None = None
_provider: TracerProvider | None = None
_consumer_group: str | None = None
# The request whose process span is current: the writer's steps inside it open no second one.
_processing: ContextVar[object | None] = ContextVar("inferq_processing", default=None)
# The id of the message the current task is about to publish (ingest knows it, the producer not).
MESSAGE_ID: ContextVar[str | None] = ContextVar("inferq_message_id", default=None)


def configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (see the module docstring)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def _exporter(env: Mapping[str, str]) -> SpanExporter:
    name = env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if name == "console":
        return ConsoleSpanExporter(formatter=lambda span: span.to_json(indent=None) + os.linesep)
    if name != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={name!r}: inferq exports 'otlp', 'console' or 'none'")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol != "http/protobuf":
        raise ValueError(f"OTLP protocol {protocol!r}: inferq exports OTLP over 'http/protobuf'")
    # Imported here: an exporter nobody asked for is not loaded.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def setup_tracing(
    service_name: str, *, consumer_group: str | None = None, exporter: SpanExporter | None = None
) -> bool:
    """Install the tracer provider when the environment asks for traces (or `exporter` is given:
    tests); True when tracing is on. Idempotent per process. Spans are exported in batches
    (``OTEL_BSP_*``) and flushed when the process exits. An exporter or protocol inferq does not
    ship stops the process at start (`SystemExit` naming the variable), never silently untraced."""
    global _tracer, _provider, _consumer_group
    if _tracer is not None:
        return True
    if exporter is None and not configured():
        return False
    try:
        exporter = exporter or _exporter(os.environ)
    except ValueError as exc:
        raise SystemExit(f"{service_name}: not started: {exc}") from exc
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider = provider
    _tracer = provider.get_tracer("inferq")
    _consumer_group = consumer_group
    log.info("tracing on: service %s, exporter %s", name, type(exporter).__name__)
    return True


def enabled() -> bool:
    return _tracer is not None


def shutdown() -> None:
    """Flush and stop (the provider also does it at exit); tracing is off afterwards."""
    global _tracer, _provider
    if _provider is not None:
        _provider.shutdown()
    _tracer, _provider = None, None


# --- HTTP: the maintained instrumentation, installed only when tracing is on -----------------------


def _disabled(instrumentation: str) -> bool:
    """Whether ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS`` (OpenTelemetry's own variable, a comma-separated
    list of instrumentation names) leaves `instrumentation` out."""
    names = os.environ.get("OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "")
    return instrumentation in {name.strip() for name in names.split(",")}


def traced_asgi(app: ASGIApp) -> ASGIApp:
    """`app` behind OpenTelemetry's ASGI middleware (server spans, context from the caller's
    ``traceparent``), or `app` itself when tracing is off (or ``asgi`` is a disabled
    instrumentation: a trace then starts at the record). Probes are not traced."""
    if _tracer is None or _disabled("asgi"):
        return app
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    traced: ASGIApp = OpenTelemetryMiddleware(
        app,
        excluded_urls="/healthz,/metrics",
        # One span per request: the per-message send/receive spans would triple the count.
        exclude_spans=["receive", "send"],
        # HTTP metrics are the services' own (`inferq.telemetry`), not the middleware's.
        meter_provider=NoOpMeterProvider(),
        tracer_provider=_provider,
    )
    return traced


def aiohttp_trace_configs() -> list[aiohttp.TraceConfig]:
    """For an aiohttp client session: HTTP client spans with ``traceparent`` sent along; none when
    tracing is off or ``aiohttp-client`` is a disabled instrumentation (the backend call keeps its
    gen_ai ``chat`` span)."""
    if _tracer is None or _disabled("aiohttp-client"):
        return []
    from opentelemetry.instrumentation.aiohttp_client import create_trace_config

    return [create_trace_config(meter_provider=NoOpMeterProvider(), tracer_provider=_provider)]


# --- Kafka headers ---------------------------------------------------------------------------------


class _HeaderGetter(Getter[Sequence[tuple[str, HeaderValue]]]):
    def get(self, carrier: Sequence[tuple[str, HeaderValue]], key: str) -> list[str] | None:
        found = [_text(v) for k, v in carrier if k == key and v is not None]
        return found or None

    def keys(self, carrier: Sequence[tuple[str, HeaderValue]]) -> list[str]:
        return [k for k, _ in carrier]


_GETTER = _HeaderGetter()
# The W3C format alone: the Kafka headers carry trace context, not baggage (whatever OTEL_PROPAGATORS
# says for HTTP), and its injection is formatted here directly, a fraction of the propagator's cost.
_W3C = TraceContextTextMapPropagator()


def _text(value: HeaderValue) -> str:
    if isinstance(value, bytes):
        return value.decode("ascii", errors="replace")
    return value or ""


def extract(headers: Iterable[tuple[str, HeaderValue]] | None) -> Context | None:
    """The trace context a record's headers carry; None when tracing is off or they carry none.
    A malformed ``traceparent`` is ignored (the propagator's rule): the record starts a new trace."""
    if _tracer is None or not headers:
        return None
    pairs = [(k, v) for k, v in headers if k in (TRACEPARENT, TRACESTATE)]
    if not pairs:
        return None
    ctx = _W3C.extract(pairs, getter=_GETTER)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def inject(headers: Headers | None, ctx: Context | None = None) -> Headers | None:
    """`headers` plus the trace context of `ctx` (default: the current one), replacing any the
    caller put there; `headers` untouched when tracing is off."""
    if _tracer is None:
        return headers
    out: Headers = [(k, v) for k, v in headers or () if k not in (TRACEPARENT, TRACESTATE)]
    span = trace.get_current_span(ctx).get_span_context()
    if not span.is_valid:
        return out
    out.append(
        (TRACEPARENT, f"00-{span.trace_id:032x}-{span.span_id:016x}-{span.trace_flags:02x}".encode("ascii"))
    )
    if span.trace_state:
        out.append((TRACESTATE, span.trace_state.to_header().encode("ascii")))
    return out


class DeliveredMessage(Protocol):
    """What a producer's acknowledgement tells (confluent-kafka's `Message`)."""

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...


class _Producer(Protocol):
    """`AsyncProducer` or a test's fake; `timeout_s` is passed on only when a caller gives one."""

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> Any: ...


class TracedProducer:
    """A producer whose every record carries the trace context in its headers. Built by a
    composition root only when tracing is on.

    `send_spans`: each record gets a ``send <topic>`` PRODUCER span (child of the current context),
    whose context the record carries, its message id from `MESSAGE_ID`. Without `send_spans` the
    record carries the current context as it is: the dispatcher writes its outcomes inside the
    request's process span, which names the request, and a span per outcome would add a third to
    the dispatcher's tracing cost for nothing a reader needs."""

    def __init__(self, producer: _Producer, *, send_spans: bool = True) -> None:
        self._producer = producer
        self._send_spans = send_spans

    async def produce(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Headers | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        # Only what the caller passed: the dispatcher's producer protocol has no timeout.
        options: dict[str, Any] = {} if timeout_s is None else {"timeout_s": timeout_s}
        tracer = _tracer
        if tracer is None:
            return await self._producer.produce(topic, value, key=key, headers=headers, **options)
        if not self._send_spans:
            return await self._producer.produce(topic, value, key=key, headers=inject(headers), **options)
        attributes: dict[str, Any] = {
            messaging.MESSAGING_SYSTEM: KAFKA,
            messaging.MESSAGING_OPERATION_TYPE: "send",
            messaging.MESSAGING_OPERATION_NAME: "send",
            messaging.MESSAGING_DESTINATION_NAME: topic,
            messaging.MESSAGING_MESSAGE_BODY_SIZE: len(value),
        }
        message_id = MESSAGE_ID.get()
        if message_id:
            attributes[messaging.MESSAGING_MESSAGE_ID] = message_id
        with tracer.start_as_current_span(
            f"send {topic}", kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            sent = await self._producer.produce(topic, value, key=key, headers=inject(headers), **options)
            _delivered(span, sent)
            return sent


def _delivered(span: Span, sent: object) -> None:
    partition = getattr(sent, "partition", None)
    offset = getattr(sent, "offset", None)
    if callable(partition) and callable(offset):
        number, at = partition(), offset()
        if isinstance(number, int) and number >= 0:
            span.set_attribute(messaging.MESSAGING_DESTINATION_PARTITION_ID, str(number))
        if isinstance(at, int) and at >= 0:
            span.set_attribute(messaging.MESSAGING_KAFKA_OFFSET, at)


# --- Consuming -------------------------------------------------------------------------------------


def _process_attributes(topic: str, partition: int, offset: int, message_id: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        messaging.MESSAGING_SYSTEM: KAFKA,
        messaging.MESSAGING_OPERATION_TYPE: "process",
        messaging.MESSAGING_OPERATION_NAME: "process",
        messaging.MESSAGING_DESTINATION_NAME: topic,
        messaging.MESSAGING_DESTINATION_PARTITION_ID: str(partition),
        messaging.MESSAGING_KAFKA_OFFSET: offset,
    }
    if message_id is not None:
        attributes[messaging.MESSAGING_MESSAGE_ID] = message_id
    if _consumer_group is not None:
        attributes[messaging.MESSAGING_CONSUMER_GROUP_NAME] = _consumer_group
    return attributes


def start_process(
    topic: str, partition: int, offset: int, parent: Context | None, *, message_id: str | None = None
) -> Span | None:
    """A ``process <topic>`` CONSUMER span for one record, child of the context its headers carried
    (`extract`) and linked to it, not made current; None when tracing is off. End it with
    `end_process`."""
    if _tracer is None:
        return None
    links = [Link(trace.get_current_span(parent).get_span_context())] if parent is not None else None
    return _tracer.start_span(
        f"process {topic}",
        context=parent or Context(),
        kind=SpanKind.CONSUMER,
        attributes=_process_attributes(topic, partition, offset, message_id),
        links=links,
    )


def end_process(span: Span | None, *, message_id: str | None = None, error: str | None = None) -> None:
    if span is None:
        return
    if message_id is not None:
        span.set_attribute(messaging.MESSAGING_MESSAGE_ID, message_id)
    if error is not None:
        span.set_attribute(error_attributes.ERROR_TYPE, error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


@contextlib.contextmanager
def _processing_span(key: object, span: Span) -> Iterator[Span]:
    token = _processing.set(key)
    try:
        with trace.use_span(span, end_on_exit=True, record_exception=True, set_status_on_exception=True):
            yield span
    finally:
        _processing.reset(token)


# What a span helper returns when tracing is off (reusable, it does nothing).
NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


def processing(
    key: object,
    *,
    topic: str,
    partition: int,
    offset: int,
    parent: Context | None,
    message_id: str,
    attributes: Mapping[str, Any],
) -> contextlib.AbstractContextManager[Span | None]:
    """The process span of the request `key`, current while the block runs (so the backend call
    and the outcome's ``send`` are its children); a no-op when tracing is off or `key`'s span is
    current already (a step inside the call)."""
    if _tracer is None or _processing.get() is key:
        return NO_SPAN
    span = start_process(topic, partition, offset, parent, message_id=message_id)
    assert span is not None  # noqa: S101 - tracing is on
    span.set_attributes(attributes)
    return _processing_span(key, span)


def annotate(name: str, value: str | int | float | bool) -> None:
    """Set an attribute on the current span (the process span inside `processing`); free when off."""
    if _tracer is not None:
        trace.get_current_span().set_attribute(name, value)


# --- The backend call ------------------------------------------------------------------------------


def chat_span(
    model: str, server_address: str | None, *, operation: str = "chat"
) -> contextlib.AbstractContextManager[Span | None]:
    """The gen_ai ``chat <model>`` CLIENT span (``embeddings <model>`` for an embedding call,
    `operation`) around one backend call (the aiohttp instrumentation's
    HTTP span is its child); finish it with `chat_result`. None in a request the sampler left out
    (its process span records nothing): no chat span, and the HTTP instrumentation is suppressed
    for the call, the costliest part of a request nobody will see."""
    if _tracer is None:
        return NO_SPAN
    if not trace.get_current_span().is_recording():
        from opentelemetry.instrumentation.utils import suppress_http_instrumentation

        suppressed: contextlib.AbstractContextManager[None] = suppress_http_instrumentation()
        return suppressed
    attributes: dict[str, Any] = {
        gen_ai.GEN_AI_OPERATION_NAME: operation,
        gen_ai.GEN_AI_PROVIDER_NAME: "openai",
        gen_ai.GEN_AI_REQUEST_MODEL: model,
    }
    if server_address:
        attributes[server_attributes.SERVER_ADDRESS] = server_address
    return _tracer.start_as_current_span(f"{operation} {model}", kind=SpanKind.CLIENT, attributes=attributes)


def chat_result(
    span: Span | None,
    *,
    response_model: str,
    input_tokens: int,
    output_tokens: int,
    finish_reason: str | None,
) -> None:
    if span is None:
        return
    span.set_attributes(
        {
            gen_ai.GEN_AI_RESPONSE_MODEL: response_model,
            gen_ai.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
            gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
        }
    )
    if finish_reason:
        span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, [finish_reason])


def chat_failed(span: Span | None, error_type: str, message: str) -> None:
    if span is None:
        return
    span.set_attribute(error_attributes.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, message))
