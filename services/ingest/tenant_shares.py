"""Admission per tenant: a tenant over its share of a tier's backlog is refused (429) while the
others are still admitted. Pure: no Kafka; the clock is injected.

Ingest knows a tier's backlog (the dispatcher group's lag, `backlog.py`) but not whose requests it
holds: records carry their tenant, but reading them back, or the outcomes on the reply topic, would
be a second consumer per ingest. So the tenant's part of the backlog is estimated from what this
ingest itself accepted:

- Per tier, the tenants of the last N requests this ingest accepted (N = the tier's capacity, at
  most `window`), kept in order. The backlog drains roughly in arrival order, so it is made of
  the most recent requests, and a tenant's part of the backlog is about its part of those N:
  ``estimate = backlog x (tenant's among the N) / N``. With several ingest instances behind one
  balancer each sees the same mix, so the ratio still holds; records written straight to Kafka
  count in the backlog but not in the mix, which makes every tenant's estimate a little high.
- A tenant's share is ``capacity x weight / (the weights of the tenants active in the tier, and
  its own)``: tenants with recent traffic split the tier; a quiet one takes no room. Active: among
  the N, or with a request accepted within the last `active_s` seconds (30 by default). The time
  window matters next to a flood: a steady tenant's 3 chats a second among another's 150 are
  often absent from the last 60 requests, and the flooder's share was then the whole tier (it
  filled it, and the steady tenant got "tier full").
- Shares are enforced only while the tier is at least `from_fill` full (half, by default): below
  that any tenant may use the room, so one busy tenant alone is never refused before the tier is
  full. Above it, a tenant whose estimate has reached its share is refused, the others admitted
  until the tier itself is full (the tier-level admission, which runs first).
- Retry-After: the time the tenant's excess takes to drain at its share of the budget, clamped like
  the tier's (1 s to a minute, ten for LOW).

- A full tier does not refuse a tenant below its share (`keeps_room`): the tier-level admission
  answers "tier full" to everyone, so a flood that overshoots the tier (a lag read a moment old,
  several ingests) would refuse the quiet tenant's chat too. A tenant whose estimate is below its
  share keeps the rest of its share on top of the capacity: the dispatcher serves each tier fairly
  across tenants, so its requests wait behind their own, not behind the flood's. The tier is then
  bounded by its capacity plus that tenant's unused share (at most twice the capacity).

An unknown backlog never refuses (as for tiers). The backlog weighed is the lag read plus this
ingest's admissions since that read (`backlog.AdmittedSinceRead`, the publisher's, counted at
admission). The tenant mix is updated once a request is produced, so a burst can overshoot a share
by the requests in flight; the tier bound still holds.
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from inferq.ingest.admission import AdmissionPolicy
from inferq.messaging.capacity import exact_decimal
from inferq.messaging.tiers import Tier

DEFAULT_WINDOW = 4_096
DEFAULT_FROM_FILL = 0.5
DEFAULT_ACTIVE_S = 30.0


@dataclass(frozen=True)
class ShareRefusal:
    """A tenant at its share of `tier`: its estimated backlog, its share, and when to retry."""

    tenant: str
    tier: Tier
    estimate: int
    share: int
    backlog: int
    capacity: int
    retry_after_s: int

    @property
    def message(self) -> str:
        return (
            f"tenant {self.tenant!r} is over its share of tier {self.tier}'s backlog (about {self.estimate} "
            f"of its {self.share}, the tier holds {self.backlog} of {self.capacity}); retry later"
        )

    def body(self) -> dict[str, object]:
        return {
            "error": self.message,
            "quota": "tier_share",
            "tenant": self.tenant,
            "tier": self.tier.value,
            "backlog_estimate": self.estimate,
            "share": self.share,
            "retry_after_s": self.retry_after_s,
        }


class BacklogShares:
    """The recent tenant mix per tier (`accepted`) and the per-tenant decision (`decide`)."""

    def __init__(
        self,
        admission: AdmissionPolicy,
        *,
        window: int = DEFAULT_WINDOW,
        from_fill: float = DEFAULT_FROM_FILL,
        active_s: float = DEFAULT_ACTIVE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0 <= from_fill <= 1:
            raise ValueError(f"from_fill must be within 0..1, got {from_fill}")
        if not 0 <= active_s < math.inf:
            raise ValueError(f"active_s must be a finite number >= 0, got {active_s}")
        self._active_s = active_s
        self._monotonic = monotonic
        # Per tier, when each tenant's last request was accepted (monotonic s); pruned past active_s.
        self._last_seen: dict[Tier, dict[str, float]] = {t: {} for t in Tier}
        self._admission = admission
        self._from_fill = from_fill
        self._size = {t: max(1, min(window, admission.capacity[t])) for t in Tier}
        self._recent: dict[Tier, deque[str]] = {t: deque() for t in Tier}
        self._counts: dict[Tier, Counter[str]] = {t: Counter() for t in Tier}

    def accepted(self, tenant: str, tier: Tier) -> None:
        """One request of `tenant` joined `tier`."""
        recent, counts = self._recent[tier], self._counts[tier]
        self._last_seen[tier][tenant] = self._monotonic()
        recent.append(tenant)
        counts[tenant] += 1
        if len(recent) > self._size[tier]:
            oldest = recent.popleft()
            counts[oldest] -= 1
            if counts[oldest] == 0:
                del counts[oldest]

    def mix(self, tier: Tier) -> Mapping[str, int]:
        """How many of the tier's recent requests each tenant sent."""
        return dict(self._counts[tier])

    def active(self, tier: Tier) -> set[str]:
        """The tenants among the tier's last N requests or with one accepted within `active_s`."""
        since = self._monotonic() - self._active_s
        seen = self._last_seen[tier]
        for tenant in [t for t, at in seen.items() if at < since]:
            del seen[tenant]
        return set(self._counts[tier]) | seen.keys()

    def keeps_room(self, tenant: str, tier: Tier, backlog: int, weights: Mapping[str, float]) -> bool:
        """Whether `tenant` may add a request to `tier` although the tier is full: it is among
        several active tenants, below its share, and the backlog is below the capacity plus the
        share it has not used."""
        weight = weights.get(tenant)
        seen = len(self._recent[tier])
        if weight is None or seen == 0:
            return False
        active = {u for u in self.active(tier) if u in weights} | {tenant}
        if len(active) < 2:
            return False
        capacity = self._admission.capacity[tier]
        share = capacity * weight / sum(weights[u] for u in active)
        estimate = backlog * self._counts[tier].get(tenant, 0) / seen
        return estimate + 1 <= share and backlog < capacity + (share - estimate)

    def decide(
        self, tenant: str, tier: Tier, backlog: int | None, weights: Mapping[str, float]
    ) -> ShareRefusal | None:
        """None admits a new `tier` request of `tenant`; a `ShareRefusal` when it is at its share."""
        admission = self._admission
        weight = weights.get(tenant)
        seen = len(self._recent[tier])
        capacity = admission.capacity[tier]
        if not admission.enabled or backlog is None or weight is None or seen == 0:
            return None
        if backlog < self._from_fill * capacity:
            return None
        counts = self._counts[tier]
        active = {u for u in self.active(tier) if u in weights} | {tenant}
        fraction = weight / sum(weights[u] for u in active)
        share = capacity * fraction
        estimate = backlog * counts.get(tenant, 0) / seen
        if estimate < share:
            return None
        excess = estimate - share + 1
        drain_s = math.ceil(
            excess * float(exact_decimal(admission.mean_latency_s[tier])) / (admission.budget * fraction)
        )
        return ShareRefusal(
            tenant=tenant,
            tier=tier,
            estimate=math.ceil(estimate),
            share=math.floor(share),
            backlog=backlog,
            capacity=capacity,
            retry_after_s=min(max(1, drain_s), admission.max_retry_after_s[tier]),
        )
