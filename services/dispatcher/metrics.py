"""The dispatcher's instruments (OpenTelemetry; exported on /metrics)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation

from services.messaging.tiers import Tier
from services.telemetry import meter


class DispatcherMetrics:
    def __init__(self, tokens_in_use: Callable[[Tier], int], budget: int) -> None:
        m = meter("inferq.dispatcher")
        self._waiting: dict[Tier, int] = dict.fromkeys(Tier, 0)
        self._queue_wait = m.create_histogram(
            "inferq_queue_wait_seconds", unit="s", description="from enqueue to taking a concurrency token"
        )
        self._end_to_end = m.create_histogram(
            "inferq_end_to_end_seconds", unit="s", description="from enqueue to the terminal outcome"
        )
        self._outcomes = m.create_counter(
            "inferq_outcomes_total", description="terminal outcomes by tier and status"
        )
        self._dead_letters = m.create_counter(
            "inferq_dead_letters_total", description="records sent to the DLQ"
        )

        def tokens(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(tokens_in_use(t), {"tier": t.value}) for t in Tier]

        def waiting(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(n, {"tier": t.value}) for t, n in self._waiting.items()]

        def limit(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(budget)]

        m.create_observable_gauge("inferq_tokens_in_use", [tokens], description="backend calls in flight")
        m.create_observable_gauge(
            "inferq_readahead_waiting", [waiting], description="requests held in memory"
        )
        m.create_observable_gauge("inferq_budget_limit", [limit], description="configured concurrency budget")

    def set_waiting(self, tier: Tier, count: int) -> None:
        self._waiting[tier] = count

    def record_queue_wait(self, tier: Tier, seconds: float) -> None:
        self._queue_wait.record(max(0.0, seconds), {"tier": tier.value})

    def record_outcome(self, tier: Tier, result: dict[str, Any]) -> None:
        self._outcomes.add(1, {"tier": tier.value, "status": str(result["status"])})
        e2e = (int(result["completed_at_ms"]) - int(result["enqueued_at_ms"])) / 1000
        self._end_to_end.record(max(0.0, e2e), {"tier": tier.value, "status": str(result["status"])})

    def record_dead_letter(self, topic: str) -> None:
        self._dead_letters.add(1, {"topic": topic})
