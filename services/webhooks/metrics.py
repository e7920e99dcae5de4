"""The webhook sender's instruments.

- `inferq_webhook_deliveries_total{outcome}`: deliveries ended: delivered, gone (410), refused
  (a rule or the SSRF guard, at delivery), expired (the retry period ran out); refused and expired
  ones are dead-lettered
- `inferq_webhook_attempts_total{result}`: attempts by result: 2xx, 3xx, 4xx, 5xx, timeout,
  connection, refused
- `inferq_webhook_delivery_delay_seconds`: from the result being stored to its delivery (2xx)
"""

from __future__ import annotations

from opentelemetry.metrics import Meter


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

    def attempt(self, result: str) -> None:
        self._attempts.add(1, {"result": result})

    def ended(self, outcome: str) -> None:
        self._deliveries.add(1, {"outcome": outcome})

    def delivered(self, delay_s: float) -> None:
        self.ended("delivered")
        self._delay.record(max(0.0, delay_s))
