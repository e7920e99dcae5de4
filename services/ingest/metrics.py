"""Ingest's instruments (OpenTelemetry, exported on /metrics). The names are what dashboards use.

- `inferq_ingest_accepted_total{tier, tenant}`: requests written to Kafka (a replayed resend is not
  counted)
- `inferq_ingest_refused_total{reason[, tier][, tenant]}`: refusals; `tier` once the tier is known
  (over_capacity, tenant_over_share, kafka_unavailable), `tenant` once the caller is (not on a 401)

`tenant` is a name from the tenants file, or ``default`` in open mode, never a value a caller chose:
the label set stays bounded by the file.
- `inferq_backlog{tier}`: the dispatcher group's lag in records; an unknown lag is left out
- `inferq_backlog_fill_ratio{tier}`: backlog over capacity (1 = full)
- `inferq_backlog_capacity{tier}`: the capacity admission compares the backlog with, in records
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.backlog import BacklogSnapshot, BacklogSource
from inferq.messaging.tiers import Tier


def backlog_observations(snapshot: BacklogSnapshot) -> list[Observation]:
    """One observation per tier whose backlog is known."""
    # An unknown backlog is left out rather than reported as an empty queue.
    return [Observation(n, {"tier": t.value}) for t, n in snapshot.backlogs.items() if n is not None]


def fill_observations(snapshot: BacklogSnapshot, admission: AdmissionPolicy) -> list[Observation]:
    """One fill ratio per tier whose backlog is known."""
    ratios = ((t, admission.fill_ratio(t, snapshot.backlogs.get(t))) for t in Tier)
    return [Observation(r, {"tier": t.value}) for t, r in ratios if r is not None]


class IngestMetrics:
    """The counters ingest adds to, and the backlog gauges read from `backlogs` at each collection."""

    def __init__(self, meter: Meter, backlogs: BacklogSource, admission: AdmissionPolicy) -> None:
        self._backlogs = backlogs
        self._admission = admission
        self._accepted = meter.create_counter(
            "inferq_ingest_accepted_total", description="requests written to Kafka"
        )
        self._refused = meter.create_counter(
            "inferq_ingest_refused_total", description="requests refused, by reason"
        )
        meter.create_observable_gauge(
            "inferq_backlog", [self._observe_backlog], description="dispatcher group lag per tier, in records"
        )
        meter.create_observable_gauge(
            "inferq_backlog_fill_ratio",
            [self._observe_fill],
            description="backlog over capacity per tier (1 = full)",
        )
        meter.create_observable_gauge(
            "inferq_backlog_capacity",
            [self._observe_capacity],
            description="backlog capacity per tier, in records (admission refuses at it)",
        )

    def accepted(self, tier: Tier, tenant: str) -> None:
        self._accepted.add(1, {"tier": tier.value, "tenant": tenant})

    def refused(self, reason: str, tier: Tier | None = None, *, tenant: str | None = None) -> None:
        attributes = {"reason": reason}
        if tier is not None:
            attributes["tier"] = tier.value
        if tenant is not None:
            attributes["tenant"] = tenant
        self._refused.add(1, attributes)

    def _observe_backlog(self, _: CallbackOptions) -> Iterable[Observation]:
        return backlog_observations(self._backlogs.snapshot())

    def _observe_capacity(self, _: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._admission.capacity[t], {"tier": t.value}) for t in Tier]

    def _observe_fill(self, _: CallbackOptions) -> Iterable[Observation]:
        return fill_observations(self._backlogs.snapshot(), self._admission)
