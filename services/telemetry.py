"""Telemetry from one place: OpenTelemetry metrics exposed for Prometheus on `/metrics`.

Metric names carry their unit (`_seconds`, `_total`); every service calls `setup_metrics()` once in
its composition root and gets meters from `meter()`. `/metrics` names tenants and their volumes, so
it is served on a port of its own (`metrics_app`; the dispatcher's with its health), never on an API
port a client reaches.
"""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

# Queue waits and latencies span milliseconds (chat) to hours (briefs).
SECONDS_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
    3600.0,
)

_configured = False


def setup_metrics(service_name: str) -> None:
    """Install the global meter provider with a Prometheus reader (idempotent per process)."""
    global _configured
    if _configured:
        return
    reader = PrometheusMetricReader()
    view = View(instrument_name="*_seconds", aggregation=ExplicitBucketHistogramAggregation(SECONDS_BUCKETS))
    provider = MeterProvider(
        resource=Resource.create({"service.name": service_name}), metric_readers=[reader], views=[view]
    )
    metrics.set_meter_provider(provider)
    _configured = True


def meter(name: str) -> metrics.Meter:
    return metrics.get_meter(name)


async def metrics_endpoint(_: Request) -> Response:
    """Starlette handler serving the Prometheus text format."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def metrics_app() -> Starlette:
    """``GET /metrics`` alone: what ingest and the results service serve on their metrics port."""
    return Starlette(routes=[Route("/metrics", metrics_endpoint, methods=["GET"])])
