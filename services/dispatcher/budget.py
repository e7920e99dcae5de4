"""The concurrency budget: tokens in use per tier, never more than the limit in total.

This is the walking skeleton's policy, strict priority under one global limit; the tiered,
hour-aware, work-conserving scheduler replaces `next_tier` behind the same interface.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.messaging.tiers import TIERS_BY_PRIORITY, Tier


class TokenBudget:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"budget must be at least 1, got {limit}")
        self.limit = limit
        self._in_use: dict[Tier, int] = dict.fromkeys(Tier, 0)

    @property
    def in_use(self) -> int:
        return sum(self._in_use.values())

    def in_use_by(self, tier: Tier) -> int:
        return self._in_use[tier]

    def next_tier(self, waiting: Mapping[Tier, int]) -> Tier | None:
        """The tier whose next request may start now, or None when none may."""
        if self.in_use >= self.limit:
            return None
        for tier in TIERS_BY_PRIORITY:
            if waiting.get(tier, 0) > 0:
                return tier
        return None

    def acquire(self, tier: Tier) -> None:
        if self.in_use >= self.limit:
            raise RuntimeError("budget exhausted: the scheduler started more than it may")
        self._in_use[tier] += 1

    def release(self, tier: Tier) -> None:
        if self._in_use[tier] <= 0:
            raise RuntimeError(f"release of a {tier} token that was never taken")
        self._in_use[tier] -= 1
