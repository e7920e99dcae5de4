"""The bench's OTLP receiver counts what it is sent, kept or only counted."""

from __future__ import annotations

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from inferq.tools.otlp_sink import OtlpSink, count_spans, decode


def an_export(spans: int) -> bytes:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(spans):
        with tracer.start_as_current_span(f"span {i}", attributes={"i": i}):
            pass
    return encode_spans(exporter.get_finished_spans()).SerializeToString()


def test_counting_an_export_agrees_with_decoding_it() -> None:
    body = an_export(7)
    assert count_spans(body) == len(decode(body)) == 7


def test_a_sink_that_only_counts_counts_the_same_spans_and_keeps_none() -> None:
    with OtlpSink(keep=True) as keeping, OtlpSink(keep=False) as counting:
        for sink in (keeping, counting):
            for spans in (3, 5):
                answer = httpx.post(f"{sink.endpoint}/v1/traces", content=an_export(spans), timeout=5)
                assert answer.status_code == 200
            garbage = httpx.post(f"{sink.endpoint}/v1/traces", content=b"\xff\xff\xff", timeout=5)
            assert garbage.status_code == 400
        assert keeping.count() == counting.count() == 8
        assert len(keeping.spans()) == 8 and counting.spans() == []
        assert keeping.requests == counting.requests == 2
        assert keeping.rejected == counting.rejected == 1
