"""The webhook sender's instruments.

- `inferq_webhook_deliveries_total{outcome}`: deliveries ended: delivered, gone (410), refused
  (a rule or the SSRF guard, at delivery), expired (the retry period ran out); refused and expired
  ones are dead-lettered
- `inferq_webhook_attempts_total{result}`: attempts by result: 2xx, 3xx, 4xx, 5xx, timeout,
  connection, refused
- `inferq_webhook_delivery_delay_seconds`: from the result being stored to its delivery (2xx)
- `inferq_webhook_outbox_pending`: deliveries owed (due or waiting for a retry), as last read
- `inferq_webhook_in_flight{tenant}`: deliveries being sent now, per tenant (each at most its
  `webhooks_in_flight`)
- `inferq_webhook_refusals_total{tenant,reason}` (`WebhookRefusals`, ingest and results): a
  tenant's limit refused something: ``queue_full`` (a delivery past its `webhooks_queued`,
  dead-lettered), ``dns_limit`` (a callback host lookup past its `dns_lookups`: 429 at submission, a
  retry at delivery)

A tenant the tenants file does not list is labelled ``other`` (a record straight from Kafka may
name anything).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation


class WebhookRefusals:
    """`inferq_webhook_refusals_total`: one per process (ingest's callback check, the results
    service's sender); `label` turns a tenant name into its label."""

    def __init__(self, meter: Meter, label: Callable[[str], str] = str) -> None:
        self._label = label
        self._refusals = meter.create_counter(
            "inferq_webhook_refusals_total",
            description="a tenant's webhook limit refused something, by reason: queue_full, dns_limit",
        )

    def count(self, tenant: str, reason: str) -> None:
        self._refusals.add(1, {"tenant": self._label(tenant), "reason": reason})


class WebhookMetrics:
    """The sender's instruments; `in_flight` is the sender's live count per tenant (read when
    the gauge is observed), `label` as `WebhookRefusals`'."""

    def __init__(self, meter: Meter, label: Callable[[str], str] = str) -> None:
        self._label = label
        self.refusals = WebhookRefusals(meter, label)
        self.in_flight: Mapping[str, int] = {}
        # Labels reported once keep being reported (0 when idle), so a gauge never shows a stale value.
        self._in_flight_labels: set[str] = set()
        meter.create_observable_gauge(
            "inferq_webhook_in_flight",
            callbacks=[self._observe_in_flight],
            description="webhook deliveries being sent now, per tenant",
        )
        self._deliveries = meter.create_counter(
            "inferq_webhook_deliveries_total", description="webhook deliveries ended, by outcome"
        )
        self._attempts = meter.create_counter(
            "inferq_webhook_attempts_total", description="webhook delivery attempts, by result"
        )
        self._delay = meter.create_histogram(
            "inferq_webhook_delivery_delay_seconds",
            unit="s",
            description="from the result being stored to its webhook delivered",
        )
        self.pending = 0
        meter.create_observable_gauge(
            "inferq_webhook_outbox_pending",
            callbacks=[self._observe_pending],
            description="webhook deliveries owed (due or waiting for a retry)",
        )

    def _observe_pending(self, _: CallbackOptions) -> Iterable[Observation]:
        yield Observation(self.pending)

    def _observe_in_flight(self, _: CallbackOptions) -> Iterable[Observation]:
        by_label: dict[str, int] = dict.fromkeys(self._in_flight_labels, 0)
        for tenant, count in list(self.in_flight.items()):
            label = self._label(tenant)
            by_label[label] = by_label.get(label, 0) + count
        self._in_flight_labels.update(by_label)
        for label, count in by_label.items():
            yield Observation(count, {"tenant": label})

    def attempt(self, result: str) -> None:
        self._attempts.add(1, {"result": result})

    def ended(self, outcome: str) -> None:
        self._deliveries.add(1, {"outcome": outcome})

    def delivered(self, delay_s: float) -> None:
        self.ended("delivered")
        self._delay.record(max(0.0, delay_s))
