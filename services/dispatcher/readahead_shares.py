"""Each tenant's bounded share of a tier's read-ahead, so a flood cannot fill it.

A tier's read-ahead holds at most `per_tier` requests (``INFERQ_DISPATCHER_READAHEAD_PER_TIER``,
``pausing.py``). Fair queueing (``fair_queue.py``) can only choose among what is held, so a
flooding tenant must not take every place: then the tier pauses and the other tenants' requests
wait in Kafka behind the flood.

    share(tier, tenant) = max(1, floor(per_tier x w / (W + RESERVE_WEIGHT)))

with `w` the tenant's weight and `W` the weights of the tenants holding or deferring requests of the
tier, the tenant included. `RESERVE_WEIGHT` keeps a place for a tenant not seen yet: even a tenant
alone stays below the tier's bound, so the partitions keep being read and a newcomer behind the
flood is found. What a tenant reads beyond its share is *deferred* (``deferred.py``): tracked as
not done (never committed past) and left in Kafka, read again when the tenant has room.

Shares apply only when a tenants file lists two tenants or more; in open mode, or with one tenant,
the read-ahead is the tier's as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from inferq.dispatcher.pausing import Pauses
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.tenant_limits import TenantLimits
from inferq.messaging.tiers import Tier

RESERVE_WEIGHT = 1.0


class ReadaheadShares:
    def __init__(
        self,
        *,
        readahead: ReadAhead,
        pauses: Pauses,
        limits: TenantLimits,
        per_tier: int,
        enabled: Callable[[], bool],
    ) -> None:
        self._readahead = readahead
        self._pauses = pauses
        self._limits = limits
        self._per_tier = per_tier
        self._enabled = enabled

    @property
    def enabled(self) -> bool:
        return self._enabled()

    def share(self, tier: Tier, tenant: str, deferring: Iterable[str] = ()) -> int:
        """How many requests of `tier` `tenant` may hold, given the tenants deferring some."""
        active = {*self._readahead.holders(tier), *deferring, tenant}
        total = sum(self._limits.weight(t) for t in active) + RESERVE_WEIGHT
        return max(1, math.floor(self._per_tier * self._limits.weight(tenant) / total))

    def has_room(self, tier: Tier, tenant: str, deferring: Iterable[str] = ()) -> bool:
        """One more request of `tenant` may join `tier`'s read-ahead."""
        if self._pauses.tier_is_full(tier):
            return False
        if not self.enabled:
            return True
        return self._readahead.held_by(tier, tenant) < self.share(tier, tenant, deferring)

    def worth_rereading(self, tier: Tier, tenant: str, deferring: Iterable[str] = ()) -> bool:
        """`tenant` has room for half its share (at least one): worth a rewind of its deferred
        records (a rewind re-fetches from the broker, so it is not done for every single place)."""
        if self._pauses.tier_is_full(tier):
            return False
        if not self.enabled:
            return True
        share = self.share(tier, tenant, deferring)
        return self._readahead.held_by(tier, tenant) <= share - max(1, share // 2)
