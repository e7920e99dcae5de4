"""A tiny OTLP/HTTP trace receiver (``POST /v1/traces``, protobuf) for the tests and the bench.

It stands in for a collector: it decodes each `ExportTraceServiceRequest` and keeps the spans
(or only counts them, for the bench), answering 200 with an empty response as a collector does.
Run it in a thread with `OtlpSink.start()`; point a service at it with
``OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint``.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

# One export batch is at most a few MB (512 spans by default); a bigger body is not a span batch.
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int  # the OTLP enum: 1 internal, 2 server, 3 client, 4 producer, 5 consumer
    attributes: dict[str, Any]
    # (trace_id, span_id) of each linked span.
    links: tuple[tuple[str, str], ...] = field(default=())
    status_code: int = 0


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def _parsed(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return request


def count_spans(body: bytes) -> int:
    """How many spans an export holds, without building them (the protobuf parse alone)."""
    return sum(
        len(scope_spans.spans)
        for resource_spans in _parsed(body).resource_spans
        for scope_spans in resource_spans.scope_spans
    )


def decode(body: bytes) -> list[ReceivedSpan]:
    request = _parsed(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        service=service,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                        status_code=span.status.code,
                    )
                )
    return spans


class OtlpSink:
    """Receives OTLP/HTTP trace exports on 127.0.0.1; `keep=False` only counts the spans (a parse
    and a count, no span objects: a benchmark's receiver shares the CPUs with what it measures)."""

    def __init__(self, port: int = 0, *, keep: bool = True) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self._count = 0
        self.requests = 0
        self.rejected = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if self.path != "/v1/traces" or not 0 < length <= MAX_BODY_BYTES:
                    sink.refused()
                    self.send_error(404 if self.path != "/v1/traces" else 400)
                    return
                body = self.rfile.read(length)
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                try:
                    if sink.keeps:
                        sink.take(decode(body))
                    else:
                        sink.counted(count_spans(body))
                except DecodeError:
                    sink.refused()
                    self.send_error(400)
                    return
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-sink", daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL for ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def keeps(self) -> bool:
        return self._keep

    def take(self, spans: list[ReceivedSpan]) -> None:
        with self._lock:
            self.requests += 1
            self._count += len(spans)
            if self._keep:
                self._spans.extend(spans)

    def counted(self, spans: int) -> None:
        """An export of `spans` spans, counted and not kept."""
        with self._lock:
            self.requests += 1
            self._count += spans

    def refused(self) -> None:
        """An export this receiver could not take (wrong path, size or body)."""
        with self._lock:
            self.rejected += 1

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def count(self) -> int:
        with self._lock:
            return self._count

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float) -> list[ReceivedSpan]:
        """The spans once `done(spans)` holds; `TimeoutError` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"spans not complete after {timeout_s:.0f} s ({len(spans)} received in "
                    f"{self.requests} exports, {self.rejected} exports refused)"
                )
            time.sleep(0.1)

    def start(self) -> OtlpSink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)

    def __enter__(self) -> OtlpSink:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
