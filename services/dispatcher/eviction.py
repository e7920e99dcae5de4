"""Shedding LOW under pressure: the oldest waiting briefs answered EVICTED to make room for chat.

Off by default (`INFERQ_DISPATCHER_EVICT_LOW_UNDER_PRESSURE`). When on, once a second the dispatcher compares
the backlog of HIGH and MEDIUM on the partitions it owns with its share of each tier's capacity
(budget x 60% of the deadline / typical latency, as ingest's admission; the typical latency as
learned from completed calls, ``call_times.py``). While either is over, the
LOW requests waiting in its read-ahead (the oldest it holds) are answered EVICTED, "peak hours,
batch delayed", instead of holding LOW's slot: the batch producer learns at once that it should
resubmit later, and LOW's slot goes to the higher tiers. Promoted (starved) LOW requests are never
evicted: they have waited long enough.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inferq.messaging.capacity import default_capacity
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier

QUEUE_WAIT_FRACTION = 0.6


@dataclass(frozen=True)
class PressurePolicy:
    capacity: Mapping[Tier, int]

    @classmethod
    def from_budget(
        cls, budget: int, typical_latency_s: Mapping[Tier, float], explicit: Mapping[Tier, int] | None = None
    ) -> PressurePolicy:
        capacity = {
            tier: default_capacity(
                budget=budget,
                deadline_ms=DEFAULT_DEADLINES_MS[tier],
                mean_latency_s=typical_latency_s[tier],
                queue_wait_fraction=QUEUE_WAIT_FRACTION,
            )
            for tier in (Tier.HIGH, Tier.MEDIUM)
        }
        return cls({**capacity, **(explicit or {})})

    def pressed(self, lag_and_share: Mapping[Tier, tuple[int, float]]) -> Tier | None:
        """The higher tier whose backlog here is at or over its share of capacity, or None."""
        for tier in (Tier.HIGH, Tier.MEDIUM):
            lag, share = lag_and_share.get(tier, (0, 0.0))
            if share > 0 and lag >= self.capacity[tier] * share:
                return tier
        return None
