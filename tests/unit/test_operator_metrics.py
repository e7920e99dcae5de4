"""The operators' instruments added beside the dispatcher's, ingest's and results' own: backend calls
by status, the budget and the schedule's window, paused partitions and consumer lag per tier, the
backlog capacity and the result delivery delay. Read back from an in-memory OpenTelemetry reader."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from inferq.dispatcher.consumer import Partition
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.lag_probe import LagProbe
from inferq.dispatcher.metrics import DispatcherMetrics, call_status
from inferq.dispatcher.schedule import Schedule
from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.metrics import IngestMetrics
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames
from inferq.results.consumer import ResultsMetrics
from tests.support.dispatcher_fakes import InMemoryConsumer
from tests.support.fakes import FakeBacklog, InMemoryMetrics, a_result, labels


def histogram(reader: InMemoryMetrics, name: str) -> dict[frozenset[tuple[str, Any]], tuple[int, float]]:
    """Count and sum per attribute set of histogram `name`."""
    data = reader._reader.get_metrics_data()
    found: dict[frozenset[tuple[str, Any]], tuple[int, float]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found[frozenset(dict(point.attributes or {}).items())] = (point.count, point.sum)
    return found


def dispatcher_metrics(reader: InMemoryMetrics, effective: int = 10) -> DispatcherMetrics:
    return DispatcherMetrics(
        tokens_in_use=dict, tokens_held=dict, effective_budget=lambda: effective, otel_meter=reader.meter
    )


def test_backend_calls_are_counted_by_bounded_status():
    reader = InMemoryMetrics()
    metrics = dispatcher_metrics(reader)
    metrics.record_backend_call(Tier.HIGH, None, 0.4)
    metrics.record_backend_call(
        Tier.HIGH, BackendError("backend answered 429", retriable=True, status=429), 0.01
    )
    metrics.record_backend_call(
        Tier.HIGH, BackendError("backend answered 503", retriable=True, status=503), 0.02
    )
    metrics.record_backend_call(Tier.LOW, BackendError("t", retriable=True, timed_out=True), 2.0)
    metrics.record_backend_call(Tier.LOW, BackendError("connection refused", retriable=True), 0.0)
    # A status outside HTTP's range is never a label of its own.
    metrics.record_backend_call(Tier.LOW, BackendError("odd", retriable=True, status=70000), -1.0)
    assert reader.points("inferq_backend_calls_total") == {
        labels(tier="HIGH", status="200", tenant="default", backend="default"): 1,
        labels(tier="HIGH", status="429", tenant="default", backend="default"): 1,
        labels(tier="HIGH", status="503", tenant="default", backend="default"): 1,
        labels(tier="LOW", status="timeout", tenant="default", backend="default"): 1,
        labels(tier="LOW", status="connection_error", tenant="default", backend="default"): 2,
    }
    durations = histogram(reader, "inferq_backend_call_duration_seconds")
    assert durations[labels(tier="HIGH")][0] == 3
    assert durations[labels(tier="LOW")] == (3, 2.0)  # a negative duration counts as 0


def test_backend_calls_label_tenants_from_the_file_only():
    reader = InMemoryMetrics()
    metrics = DispatcherMetrics(
        tokens_in_use=dict,
        tokens_held=dict,
        effective_budget=lambda: 10,
        tenant_label=lambda name: name if name == "acme" else "other",
        otel_meter=reader.meter,
    )
    metrics.record_backend_call(Tier.HIGH, None, 0.1, "acme")
    for stranger in ("x" * 200, "evil\ntenant", ""):  # whatever a producer wrote: one label
        metrics.record_backend_call(Tier.HIGH, None, 0.1, stranger)
    assert reader.points("inferq_backend_calls_total") == {
        labels(tier="HIGH", status="200", tenant="acme", backend="default"): 1,
        labels(tier="HIGH", status="200", tenant="other", backend="default"): 3,
    }


def test_call_status_of_a_timeout_wins_over_its_status():
    assert call_status(BackendError("x", retriable=True, status=504, timed_out=True)) == "timeout"
    assert call_status(BackendError("x", retriable=False, status=400)) == "400"


def test_budget_window_and_tier_limits_follow_the_adaptive_cut():
    reader = InMemoryMetrics()
    effective = {"value": 10}
    metrics = dispatcher_metrics(reader)
    schedule = Schedule.default(budget=10).pin("peak")
    metrics.watch_schedule(
        budget=10, window=lambda: schedule.window_at(datetime.now(UTC)), effective=lambda: effective["value"]
    )
    assert reader.points("inferq_budget") == {labels(): 10}
    assert reader.points("inferq_schedule_window_info") == {labels(window="peak"): 1}
    # The peak window: 6/3/1 guaranteed.
    assert reader.points("inferq_tier_floor") == {
        labels(tier="HIGH"): 6,
        labels(tier="MEDIUM"): 3,
        labels(tier="LOW"): 1,
    }
    effective["value"] = 8  # cut by 2: LOW gives up its slot first, then MEDIUM one
    assert reader.points("inferq_tier_floor") == {
        labels(tier="HIGH"): 6,
        labels(tier="MEDIUM"): 2,
        labels(tier="LOW"): 0,
    }
    ceilings = reader.points("inferq_tier_ceiling")
    assert all(value <= 10 for value in ceilings.values())
    assert ceilings[labels(tier="LOW")] == 0


def test_paused_partitions_by_tier_and_consumer_lag():
    reader = InMemoryMetrics()
    metrics = dispatcher_metrics(reader)
    metrics.watch_paused(lambda: {"HIGH": 0, "MEDIUM": 1, "LOW": 3, "retry": 1})
    assert reader.points("inferq_paused_partitions_by_tier") == {
        labels(tier="HIGH"): 0,
        labels(tier="MEDIUM"): 1,
        labels(tier="LOW"): 3,
        labels(tier="retry"): 1,
    }
    topics = TopicNames()
    consumer = InMemoryConsumer({topics.requests(Tier.LOW): 2, topics.requests(Tier.HIGH): 1})
    probe = LagProbe(consumer, topics, metrics)

    async def scenario() -> None:
        await consumer.start(_NoListener())
        for _ in range(5):
            consumer.produce(Partition(topics.requests(Tier.LOW), 0), b"x")
        consumer.produce(Partition(topics.requests(Tier.LOW), 1), b"x")
        await probe.probe()

    asyncio.run(scenario())
    assert reader.points("inferq_consumer_lag") == {labels(tier="LOW"): 6, labels(tier="HIGH"): 0}


class _NoListener:
    async def on_revoked(self, revoked: list[Any]) -> None:
        return None

    async def on_assigned(self, assigned: list[Any]) -> None:
        return None


def test_backlog_capacity_is_exposed_for_every_tier():
    reader = InMemoryMetrics()
    policy = AdmissionPolicy(capacity={Tier.HIGH: 10, Tier.MEDIUM: 20, Tier.LOW: 100})
    IngestMetrics(reader.meter, FakeBacklog(), policy)
    assert reader.points("inferq_backlog_capacity") == {
        labels(tier="HIGH"): 10,
        labels(tier="MEDIUM"): 20,
        labels(tier="LOW"): 100,
    }


def test_result_delivery_delay_is_per_tier_and_never_negative():
    reader = InMemoryMetrics()
    metrics = ResultsMetrics(reader.meter)
    result = a_result("r1", completed_at_ms=1_000)
    metrics.delivered([result, a_result("r2", completed_at_ms=5_000)], now_ms=3_000)
    delays = histogram(reader, "inferq_result_delivery_delay_seconds")
    assert delays == {labels(tier=result.tier.value): (2, 2.0)}
