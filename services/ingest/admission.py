"""Admission control: whether a new request may join its tier's backlog (pure, no Kafka, no clock).

Policy (docs/architecture.md, "Admission"):

- Each tier has a backlog capacity: budget x target wait / mean latency, where the target wait is
  60% of the tier's deadline (queue wait under 60% of the latency tolerance, 40% left for inference).
  With a budget of 10 and HIGH's 5 s deadline and 0.5 s latency: 10 x 3 s / 0.5 s = 60.
- LOW is refused first: a new LOW request is refused when LOW is full, or when HIGH or MEDIUM is
  full (batch load is shed before interactive load).
- A HIGH or MEDIUM request is refused only when its own tier is full.
- A tier is full when its backlog is >= its capacity. A tier whose backlog is unknown (the lag could
  not be read) never causes a refusal: admission must not turn a Kafka outage into a 429 storm.
- Retry-After is the time the excess backlog needs to drain at the full budget:
  (backlog - capacity + 1) x mean latency / budget, rounded up, at least 1 s and at most 60 s
  (HIGH, MEDIUM) or 600 s (LOW).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from inferq.messaging.capacity import default_capacity, exact_decimal
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, TIERS_BY_PRIORITY, Tier

# Queue wait may use this share of a tier's deadline; the rest is left for inference.
DEFAULT_QUEUE_WAIT_FRACTION = 0.6
DEFAULT_BUDGET = 10
# An interactive client is told to come back within a minute; a batch producer may wait ten.
MAX_RETRY_AFTER_S: Mapping[Tier, int] = MappingProxyType({Tier.HIGH: 60, Tier.MEDIUM: 60, Tier.LOW: 600})


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: the tier that is full, its backlog and capacity, and when to retry."""

    tier: Tier
    full_tier: Tier
    backlog: int
    capacity: int
    retry_after_s: int

    @property
    def message(self) -> str:
        shed = "; LOW requests are refused first" if self.full_tier is not self.tier else ""
        return (
            f"tier {self.full_tier} is over capacity (backlog {self.backlog}, capacity {self.capacity})"
            f"{shed}; retry later"
        )

    def body(self) -> dict[str, object]:
        """The JSON body of the 429 answer."""
        return {
            "error": self.message,
            "retry_after_s": self.retry_after_s,
            "tier": self.full_tier.value,
            "backlog": self.backlog,
            "capacity": self.capacity,
        }


@dataclass(frozen=True)
class AdmissionPolicy:
    """Per-tier capacities and drain rates; `decide()` admits or refuses one new request.

    `capacity` must name every tier; build it with `from_deadlines()` to get the defaults.
    """

    capacity: Mapping[Tier, int]
    mean_latency_s: Mapping[Tier, float] = field(default_factory=lambda: DEFAULT_MEAN_LATENCY_S)
    budget: int = DEFAULT_BUDGET
    enabled: bool = True
    max_retry_after_s: Mapping[Tier, int] = field(default_factory=lambda: MAX_RETRY_AFTER_S)

    def __post_init__(self) -> None:
        for tier in Tier:
            if self.capacity.get(tier, 0) < 1:
                raise ValueError(f"capacity of {tier} must be >= 1, got {self.capacity.get(tier)}")
            if self.mean_latency_s.get(tier, 0.0) <= 0:
                raise ValueError(f"mean latency of {tier} must be > 0 s, got {self.mean_latency_s.get(tier)}")
            if self.max_retry_after_s.get(tier, 0) < 1:
                raise ValueError(f"max Retry-After of {tier} must be >= 1 s")
        if self.budget < 1:
            raise ValueError(f"budget must be >= 1, got {self.budget}")
        # Frozen copies: a caller mutating its dict later must not change a policy in use.
        object.__setattr__(self, "capacity", MappingProxyType(dict(self.capacity)))
        object.__setattr__(self, "mean_latency_s", MappingProxyType(dict(self.mean_latency_s)))
        object.__setattr__(self, "max_retry_after_s", MappingProxyType(dict(self.max_retry_after_s)))

    @classmethod
    def from_deadlines(
        cls,
        deadlines_ms: Mapping[Tier, int],
        *,
        budget: int = DEFAULT_BUDGET,
        mean_latency_s: Mapping[Tier, float] = DEFAULT_MEAN_LATENCY_S,
        queue_wait_fraction: float = DEFAULT_QUEUE_WAIT_FRACTION,
        capacity: Mapping[Tier, int] | None = None,
        enabled: bool = True,
    ) -> AdmissionPolicy:
        """Capacities from the deadlines (see `default_capacity`), except tiers set in `capacity`."""
        if not 0 < queue_wait_fraction < 1:
            raise ValueError(f"queue_wait_fraction must be in (0, 1), got {queue_wait_fraction}")
        explicit = capacity or {}
        capacities = {
            tier: explicit[tier]
            if tier in explicit
            else default_capacity(
                budget=budget,
                deadline_ms=deadlines_ms[tier],
                mean_latency_s=mean_latency_s[tier],
                queue_wait_fraction=queue_wait_fraction,
            )
            for tier in Tier
        }
        return cls(capacity=capacities, mean_latency_s=mean_latency_s, budget=budget, enabled=enabled)

    def fill_ratio(self, tier: Tier, backlog: int | None) -> float | None:
        """Backlog over capacity (1.0 = full); None when the backlog is unknown."""
        return None if backlog is None else backlog / self.capacity[tier]

    def retry_after_s(self, request_tier: Tier, full_tier: Tier, backlog: int) -> int:
        """Seconds for `full_tier`'s excess to drain at the full budget, clamped for `request_tier`."""
        excess = backlog - self.capacity[full_tier] + 1
        drain_s = math.ceil(excess * exact_decimal(self.mean_latency_s[full_tier]) / self.budget)
        return min(max(1, drain_s), self.max_retry_after_s[request_tier])

    def decide(self, tier: Tier, backlogs: Mapping[Tier, int | None]) -> Refusal | None:
        """None admits a new `tier` request; a `Refusal` says which tier is full and when to retry.

        `backlogs` maps a tier to its lag in records; a missing or None entry means unknown.
        """
        if not self.enabled:
            return None
        # LOW yields to every tier's overflow; the others answer only for themselves.
        watched = TIERS_BY_PRIORITY if tier is Tier.LOW else (tier,)
        refusals = [
            Refusal(
                tier=tier,
                full_tier=full,
                backlog=backlog,
                capacity=self.capacity[full],
                retry_after_s=self.retry_after_s(tier, full, backlog),
            )
            for full in watched
            if (backlog := backlogs.get(full)) is not None and backlog >= self.capacity[full]
        ]
        # A refused LOW request can only get in once every full tier has drained: name the slowest.
        return max(refusals, key=lambda r: r.retry_after_s, default=None)


@dataclass
class FillAlarm:
    """Reports a tier the first time its fill ratio rises above `threshold`, not on every look.

    The tier is re-armed once its ratio falls to `threshold - rearm_margin` or below, so a backlog
    hovering at the threshold does not log on every refresh. An unknown ratio changes nothing.
    """

    threshold: float = 0.7
    rearm_margin: float = 0.05
    _above: set[Tier] = field(default_factory=set)

    def observe(self, ratios: Mapping[Tier, float | None]) -> tuple[list[Tier], list[Tier]]:
        """Returns (tiers that just rose above the threshold, tiers that just fell back below it)."""
        rose: list[Tier] = []
        fell: list[Tier] = []
        for tier in TIERS_BY_PRIORITY:
            ratio = ratios.get(tier)
            if ratio is None:
                continue
            if tier not in self._above and ratio > self.threshold:
                self._above.add(tier)
                rose.append(tier)
            elif tier in self._above and ratio <= self.threshold - self.rearm_margin:
                self._above.discard(tier)
                fell.append(tier)
        return rose, fell

    def above(self) -> frozenset[Tier]:
        return frozenset(self._above)
