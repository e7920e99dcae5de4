"""What tracing costs, timed in process: its hooks with tracing off, and the SDK's price of a span.

No throughput run can show it: the hooks are in the code either way, and a difference of well under a
percent drowns in the run-to-run noise of this machine. So the calls one request makes with tracing
off are timed here against the same chain of awaits without them:

- intake: `tracing.extract` of the record's headers;
- execution: an `enabled()` check and the extra coroutine the call runs in;
- the backend call: an `enabled()` check;
- the outcome: `tracing.annotate`.

The bench process never installs tracing, so these run exactly as in a dispatcher started without
OTEL_* settings.

`span_cost` prices one span of the OpenTelemetry Python SDK with tracing on, on a tracer provider of
its own (the process's global one stays unset): starting and ending a span with a process span's
attributes and a link, and its OTLP protobuf encoding in batches of 512 (the batch processor's
default export size), the two parts a dispatcher pays per span under the GIL. A dispatcher makes
`SPANS_PER_REQUEST` spans a request; at its untraced rate, the traced one can keep at most
1 / (1 + spans x per-span cost x rate) of it, whatever else is done.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, SpanKind

from inferq import tracing
from inferq.dispatcher.backend import Completion

# The dispatcher's spans per request: the record's process span, the chat span and the HTTP call's.
SPANS_PER_REQUEST = 3
SPANS = 5_120
EXPORT_BATCH = 512

ITERATIONS = 200_000
REPEATS = 5
_COMPLETION = Completion("hi", "inferq-fast", 3, 2, 5, finish_reason="stop")
_HEADERS: list[tuple[str, bytes]] = []


async def _backend_answer() -> Completion:
    return _COMPLETION


async def _bare_call() -> Completion:
    return await _backend_answer()


async def _bare() -> None:
    completion = await _bare_call()
    assert completion is _COMPLETION  # noqa: S101 - keeps the call from being optimised out of sight


async def _hooked_call() -> Completion:
    if not tracing.enabled():  # as `ChatBackend.complete` does
        return await _backend_answer()
    raise RuntimeError("tracing is on")


async def _hooked_inner() -> None:
    completion = await _hooked_call()
    tracing.annotate(tracing.OUTCOME, "OK")
    assert completion is _COMPLETION  # noqa: S101


async def _hooked() -> None:
    tracing.extract(_HEADERS)
    if not tracing.enabled():  # as `Execution.call` does
        await _hooked_inner()
        return
    raise RuntimeError("tracing is on")


async def _per_call_ns(step: Any, iterations: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(iterations):
        await step()
    return (time.perf_counter_ns() - started) / iterations


def tracing_off_cost(iterations: int = ITERATIONS, repeats: int = REPEATS) -> dict[str, float]:
    """ns per request with the hooks and without (best of `repeats`, alternating), tracing off."""
    if tracing.enabled():
        raise RuntimeError("tracing is on in this process: the cost of tracing off cannot be measured")

    async def measure() -> tuple[float, float]:
        hooked: list[float] = []
        bare: list[float] = []
        for _ in range(repeats):
            hooked.append(await _per_call_ns(_hooked, iterations))
            bare.append(await _per_call_ns(_bare, iterations))
        return min(hooked), min(bare)

    hooked_ns, bare_ns = asyncio.run(measure())
    return {
        "ns_per_request": hooked_ns,
        "baseline_ns_per_request": bare_ns,
        "iterations": iterations,
        "repeats": repeats,
    }


class _Kept(SpanExporter):
    """Keeps the ended spans, to encode them apart."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _spans(tracer: Any, count: int) -> float:
    """µs per span to start and end `count` spans shaped like the dispatcher's process span."""
    parent = tracer.start_span("parent").get_span_context()
    started = time.perf_counter()
    for offset in range(count):
        span = tracer.start_span(
            "process inferq.requests.high",
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.name": "process",
                "messaging.destination.name": "inferq.requests.high",
                "messaging.destination.partition.id": "3",
                "messaging.kafka.offset": offset,
                "messaging.message.id": "9b2f4c1e-5d7a-4e8b-a1c3-0f6d2e8b7a95",
                "messaging.consumer.group.name": "inferq-dispatcher",
            },
            links=[Link(parent)],
        )
        span.set_attribute("inferq.queue_wait_ms", 5)
        span.end()
    return (time.perf_counter() - started) / count * 1e6


def span_cost(count: int = SPANS, repeats: int = REPEATS) -> dict[str, float]:
    """µs per span (median of `repeats`): start + end, and OTLP encoding in batches of 512."""
    kept = _Kept()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("inferq.bench")
    create: list[float] = []
    encode: list[float] = []
    for _ in range(repeats):
        kept.spans.clear()
        create.append(_spans(tracer, count))
        batches = [kept.spans[i : i + EXPORT_BATCH] for i in range(0, len(kept.spans), EXPORT_BATCH)]
        started = time.perf_counter()
        for batch in batches:
            encode_spans(batch).SerializeToString()
        encode.append((time.perf_counter() - started) / max(1, len(kept.spans)) * 1e6)
    provider.shutdown()
    return {
        "start_end_us": statistics.median(create),
        "encode_us": statistics.median(encode),
        "spans_per_request": SPANS_PER_REQUEST,
        "spans": count,
        "repeats": repeats,
    }


def traced_ceiling(untraced_rate: float, cost: dict[str, float]) -> float:
    """The most of `untraced_rate` a dispatcher can keep with every request traced: each request's
    time plus its spans' start, end and encoding, on one core."""
    per_request_s = 1 / untraced_rate
    spans_s = cost["spans_per_request"] * (cost["start_end_us"] + cost["encode_us"]) / 1e6
    return per_request_s / (per_request_s + spans_s)
