"""Ingest's instruments alone, read back from an in-memory OpenTelemetry reader."""

from __future__ import annotations

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.metrics import IngestMetrics
from inferq.messaging.tiers import Tier
from tests.support.fakes import FakeBacklog, InMemoryMetrics, labels

POLICY = AdmissionPolicy(capacity={Tier.HIGH: 10, Tier.MEDIUM: 20, Tier.LOW: 100})


def test_counters_keep_their_names_and_labels():
    reader = InMemoryMetrics()
    metrics = IngestMetrics(reader.meter, FakeBacklog(), POLICY)
    metrics.accepted(Tier.HIGH, "acme")
    metrics.accepted(Tier.HIGH, "acme")
    metrics.accepted(Tier.LOW, "default")
    metrics.refused("malformed", tenant="acme")
    metrics.refused("unauthenticated_unknown")
    metrics.refused("over_capacity", Tier.LOW, tenant="acme")
    assert reader.points("inferq_ingest_accepted_total") == {
        labels(tier="HIGH", tenant="acme"): 2,
        labels(tier="LOW", tenant="default"): 1,
    }
    assert reader.points("inferq_ingest_refused_total") == {
        labels(reason="malformed", tenant="acme"): 1,
        labels(reason="unauthenticated_unknown"): 1,
        labels(reason="over_capacity", tier="LOW", tenant="acme"): 1,
    }


def test_backlog_gauges_read_the_source_at_collection_and_leave_unknown_tiers_out():
    reader = InMemoryMetrics()
    backlog = FakeBacklog(HIGH=5, MEDIUM=None, LOW=50)
    IngestMetrics(reader.meter, backlog, POLICY)
    assert reader.points("inferq_backlog") == {labels(tier="HIGH"): 5, labels(tier="LOW"): 50}
    assert reader.points("inferq_backlog_fill_ratio") == {labels(tier="HIGH"): 0.5, labels(tier="LOW"): 0.5}
    backlog.lags[Tier.MEDIUM] = 30
    assert reader.points("inferq_backlog_fill_ratio")[labels(tier="MEDIUM")] == 1.5


def test_nothing_is_reported_while_every_backlog_is_unknown():
    reader = InMemoryMetrics()
    IngestMetrics(reader.meter, FakeBacklog(), POLICY)
    assert reader.points("inferq_backlog") == {}
    assert reader.points("inferq_backlog_fill_ratio") == {}
