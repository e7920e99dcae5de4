"""Concurrency tokens: how many backend calls of each tier are in flight, and taking one more.

A `TokenPool` is the budget's ledger. The scheduler decides which tier should start next from a
snapshot of tokens in use; the pool then takes the token atomically, refusing when the total would
exceed `total_limit` or the tier's count would exceed `tier_limit`, so the budget is never exceeded
even when several dispatchers decide at once from stale snapshots. A refused acquire only means
"look again".

`LocalTokenPool` is exact for one dispatcher process. A group of dispatchers shares one budget
through `inferq.tools.redis` (Redis leases).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from inferq.messaging.tiers import Tier


@dataclass(frozen=True)
class Lease:
    """One token held for one backend call; give it back with `TokenPool.release`."""

    tier: Tier
    lease_id: str


class TokenPool(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None:
        """Give back every token this process holds."""
        ...

    def in_use(self) -> Mapping[Tier, int]:
        """Tokens in use per tier across everyone sharing the pool, as last known (ours included)."""
        ...

    def held_locally(self) -> Mapping[Tier, int]:
        """Tokens this process holds right now."""
        ...

    async def try_acquire(self, tier: Tier, *, total_limit: int, tier_limit: int) -> Lease | None:
        """Take a token if total < total_limit and count(tier) < tier_limit, atomically; else None."""
        ...

    async def release(self, lease: Lease) -> None: ...


class LocalTokenPool:
    """The budget of a single dispatcher process: exact, in memory."""

    def __init__(self) -> None:
        self._held: dict[Tier, int] = dict.fromkeys(Tier, 0)
        self._next_id = 0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._held = dict.fromkeys(Tier, 0)

    def in_use(self) -> Mapping[Tier, int]:
        return dict(self._held)

    def held_locally(self) -> Mapping[Tier, int]:
        return dict(self._held)

    async def try_acquire(self, tier: Tier, *, total_limit: int, tier_limit: int) -> Lease | None:
        if sum(self._held.values()) >= total_limit or self._held[tier] >= tier_limit:
            return None
        self._held[tier] += 1
        self._next_id += 1
        return Lease(tier, str(self._next_id))

    async def release(self, lease: Lease) -> None:
        if self._held[lease.tier] <= 0:
            raise RuntimeError(f"release of a {lease.tier} token that was never taken")
        self._held[lease.tier] -= 1
