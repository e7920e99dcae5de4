"""What ``/healthz`` (liveness) and ``/readyz`` (readiness) report about a running dispatcher
(read-only views over its parts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inferq.dispatcher.adaptive import Budget
from inferq.dispatcher.checkpoint import Checkpoint
from inferq.dispatcher.consumer import TierConsumer
from inferq.dispatcher.inflight import InFlight
from inferq.dispatcher.policies import Scheduler
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.tokens import TokenPool
from inferq.messaging.tiers import Tier


@dataclass(frozen=True)
class DispatcherHealth:
    checkpoint: Checkpoint
    pool: TokenPool
    readahead: ReadAhead
    consumer: TierConsumer
    budget: Budget
    scheduler: Scheduler
    inflight: InFlight
    # Records left in Kafka because their tenant was over its read-ahead share (``deferred.py``).
    deferred: Callable[[], int] = lambda: 0
    # Each backend's circuit breaker: "closed", "half_open" or "open" (``routing.py``).
    circuits: Callable[[], dict[str, str]] = dict
    # The per-minute budget: shared by the group or not, degraded, a start's added round trip.
    rate_budget: Callable[[], dict[str, object]] = dict

    def ready_problems(self) -> list[str]:
        """Why this member is not doing its share of the group's work now (empty: it is). A member
        the group assigned no partition (more members than partitions) is ready: it is a standby
        that takes partitions at the next rebalance. Kafka's reachability is the process's watch."""
        return [] if self.checkpoint.in_group() else ["not in the consumer group (joining or rebalancing)"]

    def snapshot(self) -> dict[str, object]:
        return {
            # > 0 means this member joined the group and will consume.
            "assigned": self.checkpoint.assigned_count(),
            "tokens_in_use": sum(self.pool.held_locally().values()),
            "waiting": len(self.readahead),
            "held_by_tier": {t.value: self.readahead.held(t) for t in Tier},
            "deferred": self.deferred(),
            # Calls, and outcomes being written (bounded per tier: inflight.py).
            "tasks": len(self.inflight),
            "paused_partitions": len(self.consumer.paused()),
            "effective_budget": self.budget.effective,
            "window": self.scheduler.window().name,
            "policy": self.scheduler.name,
            "backends": self.circuits(),
            "rate_budget": self.rate_budget(),
        }
