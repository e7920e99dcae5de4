"""Tiers, the scenario → tier map and each tier's deadline.

Policy (docs/api.md, "The request"): realtime chat, chat-time embeddings and any unknown scenario are
HIGH (a user is waiting); emotion analysis never drops below MEDIUM; briefs, batch jobs and memories
embedded in bulk are LOW. A producer may raise a
request's tier explicitly (a paid "express" request), never lower emotion analysis below MEDIUM.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

_V = TypeVar("_V", int, float)


class Tier(enum.StrEnum):
    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"

    @property
    def rank(self) -> int:
        """0 for HIGH: lower rank is served first."""
        return _RANK[self]


_RANK = {Tier.HIGH: 0, Tier.MEDIUM: 1, Tier.LOW: 2}
TIERS_BY_PRIORITY: tuple[Tier, ...] = (Tier.HIGH, Tier.MEDIUM, Tier.LOW)

DEFAULT_SCENARIO_TIERS: Mapping[str, Tier] = MappingProxyType(
    {
        "realtime_chat": Tier.HIGH,
        "emotion_analysis": Tier.MEDIUM,
        "recipe_recommend": Tier.MEDIUM,
        "schedule_plan": Tier.MEDIUM,
        "morning_brief": Tier.LOW,
        "batch": Tier.LOW,
        # Embeddings (``POST /v1/embeddings``): a memory looked up while a user waits, and a
        # companion's memories embedded in bulk.
        "chat_embedding": Tier.HIGH,
        "memory_embedding": Tier.LOW,
    }
)

# Scenarios that must never be served below a tier, whatever the producer asks.
DEFAULT_TIER_FLOORS: Mapping[str, Tier] = MappingProxyType({"emotion_analysis": Tier.MEDIUM})

DEFAULT_DEADLINES_MS: Mapping[Tier, int] = MappingProxyType(
    {Tier.HIGH: 5_000, Tier.MEDIUM: 30_000, Tier.LOW: 12 * 3_600_000}
)

# Typical inference time per tier (fast, accurate, cheap model): admission capacity, early drop.
DEFAULT_MEAN_LATENCY_S: Mapping[Tier, float] = MappingProxyType(
    {Tier.HIGH: 0.5, Tier.MEDIUM: 2.8, Tier.LOW: 5.0}
)


def complete_per_tier(defaults: Mapping[Tier, _V], given: Mapping[Tier, _V], what: str) -> dict[Tier, _V]:
    """A per-tier setting given for some tiers ('{"HIGH": 0.3}' in the environment) changes those
    tiers only: every tier keeps a value. Each must be positive."""
    merged = dict(defaults) | dict(given)
    for tier, value in merged.items():
        if value <= 0:
            raise ValueError(f"{what} of {tier} must be > 0, got {value}")
    return merged


@dataclass(frozen=True)
class TierPolicy:
    """Decides a request's tier from its scenario and an optional explicit priority."""

    scenario_tiers: Mapping[str, Tier] = field(default_factory=lambda: DEFAULT_SCENARIO_TIERS)
    floors: Mapping[str, Tier] = field(default_factory=lambda: DEFAULT_TIER_FLOORS)
    unknown: Tier = Tier.HIGH

    def tier_for(self, scenario: str, explicit: Tier | None = None) -> Tier:
        tier = explicit if explicit is not None else self.scenario_tiers.get(scenario, self.unknown)
        floor = self.floors.get(scenario)
        if floor is not None and tier.rank > floor.rank:
            return floor
        return tier
