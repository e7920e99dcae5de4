"""The webhook sender's instruments.

- `inferq_webhook_deliveries_total{outcome}`: deliveries ended: delivered, gone (410), refused
  (a rule or the SSRF guard, at delivery), expired (the retry period ran out); refused and expired
  ones are dead-lettered
- `inferq_webhook_attempts_total{result}`: attempts by result: 2xx, 3xx, 4xx, 5xx, timeout,
  connection, refused
- `inferq_webhook_delivery_delay_seconds`: from the result being stored to its delivery (2xx)
- `inferq_webhook_outbox_pending`: deliveries owed (due or waiting for a retry), as last read
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation


class WebhookMetrics:
    def __init__(self, meter: Meter) -> None:
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

    def attempt(self, result: str) -> None:
        self._attempts.add(1, {"result": result})

    def ended(self, outcome: str) -> None:
        self._deliveries.add(1, {"outcome": outcome})

    def delivered(self, delay_s: float) -> None:
        self.ended("delivered")
        self._delay.record(max(0.0, delay_s))
