"""The read-ahead: requests taken from Kafka that wait for a token, by scheduling tier.

Small by design (bounded per tier by the dispatcher's pause rule, and per tenant within a tier by
``readahead_shares.py``): the real backlog waits in Kafka. Within a tier, tenants are served by
weight (``fair_queue.py``); a tenant with as many calls running as its `max_concurrency`, or,
when only the tenant headroom is free (``tenant_headroom.py``, `start_gates`), holding its weighted
share or asking for a MEDIUM or LOW start, is skipped in favour of the others of the tier, and its
waiting work does not count as demand.
Two timers act on it: expiry (a request past its deadline, or with less time left than its tier's
typical inference takes, as learned from completed calls by ``call_times.py``, is answered EXPIRED
and never costs an LLM call) and aging (a LOW request older than the promotion age is scheduled as
MEDIUM, first in its tenant's MEDIUM queue, so briefs always progress). It sees every arrival,
start and end, so it also feeds the forecast lending (``forecast.py``) and hands its outlook to the
scheduler inside `demand`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from inferq.dispatcher.call_times import CallTimes
from inferq.dispatcher.fair_queue import FairQueue
from inferq.dispatcher.forecast import Lending
from inferq.dispatcher.policies import Demand
from inferq.dispatcher.tenant_headroom import TenantHeadroom
from inferq.dispatcher.tenant_limits import EqualTenants, TenantLimits
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier

TOO_LATE = "deadline passed"
WOULD_BE_LATE = "less time left than the tier's typical inference"


@dataclass(frozen=True)
class Expired:
    work: Work
    reason: str


class ReadAhead:
    def __init__(
        self,
        *,
        promotion_age_ms: int,
        early_drop_ms: Mapping[Tier, int] | None = None,
        tenants: TenantLimits | None = None,
        headroom: TenantHeadroom | None = None,
        calls: CallTimes | None = None,
        lending: Lending | None = None,
    ) -> None:
        self._tenants: TenantLimits = tenants or EqualTenants()
        self._queues: dict[Tier, FairQueue] = {t: FairQueue(self._tenants.weight) for t in Tier}
        self._promotion_age_ms = promotion_age_ms
        self._early_drop_ms = dict(early_drop_ms or {})
        self._held_by_source_tier: dict[Tier, int] = dict.fromkeys(Tier, 0)
        self._held_by_tenant: Counter[tuple[Tier, str]] = Counter()
        # Backend calls running per tenant (this process's), for the tenants' concurrency caps.
        self._running: Counter[str] = Counter()
        self._headroom = headroom
        # The tiers' call times (learned when the caller's CallTimes learns) and the forecast.
        self._calls = calls or (lending.calls if lending is not None else CallTimes(self._early_drop_ms))
        self._lending = lending

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def held(self, source_tier: Tier) -> int:
        """Requests read from `source_tier`'s topic and not yet started (promoted ones included)."""
        return self._held_by_source_tier[source_tier]

    def held_by(self, source_tier: Tier, tenant: str) -> int:
        """Requests of `tenant` read from `source_tier`'s topic and not yet started."""
        return self._held_by_tenant[(source_tier, tenant)]

    def holders(self, source_tier: Tier) -> list[str]:
        """The tenants with requests of `source_tier` held."""
        return [t for (tier, t), n in self._held_by_tenant.items() if tier is source_tier and n > 0]

    def held_by_tenant(self) -> dict[str, int]:
        """Requests held per tenant, every tier."""
        held: dict[str, int] = {}
        for (_, tenant), n in self._held_by_tenant.items():
            held[tenant] = held.get(tenant, 0) + n
        return held

    def running(self, tenant: str) -> int:
        return self._running[tenant]

    def running_by_tenant(self) -> dict[str, int]:
        return {t: n for t, n in self._running.items() if n > 0}

    def may_start(self, tenant: str) -> bool:
        """Below its concurrency cap (or without one)."""
        cap = self._tenants.max_concurrency(tenant)
        return cap is None or self._running[tenant] < cap

    def start_gates(self, *, free: int, budget: int, now_ms: int | None) -> dict[Tier, Callable[[str], bool]]:
        """Per scheduling tier, which tenants may start a request now, with `free` of `budget`
        tokens free: below their cap and, when only the tenant headroom is left while other tenants
        are active, below their weighted share and for a HIGH request only."""
        headroom = self._headroom
        if headroom is None or free > headroom.kept(budget):
            return dict.fromkeys(Tier, self.may_start)
        busy = set(self.running_by_tenant()) | {t for (_, t), n in self._held_by_tenant.items() if n > 0}
        active = headroom.active(now_ms, busy)

        def gate(tier: Tier) -> Callable[[str], bool]:
            def may_start(tenant: str) -> bool:
                running = self._running[tenant]
                return self.may_start(tenant) and headroom.allows(
                    tenant, tier, running=running, free=free, budget=budget, active=active
                )

            return may_start

        return {t: gate(t) for t in Tier}

    def lendable_gates(
        self, gates: Mapping[Tier, Callable[[str], bool]], max_preemptions: int
    ) -> dict[Tier, Callable[[str], bool]]:
        """`gates` narrowed to the tenants whose next request may be lent a slot past its tier's
        ceiling: preempted fewer than `max_preemptions` times (one that was preempted that often
        waits within its tier's share, and the tenant's newer requests behind it)."""

        def narrowed(tier: Tier) -> Callable[[str], bool]:
            queue, gate = self._queues[tier], gates[tier]

            def may_start(tenant: str) -> bool:
                head = queue.head(tenant)
                return gate(tenant) and head is not None and head.preemptions < max_preemptions

            return may_start

        return {t: narrowed(t) for t in Tier}

    def add(self, work: Work) -> None:
        self._queues[work.scheduling_tier].append(work)
        self._count(work, 1)
        if self._headroom is not None:
            self._headroom.seen(work.request.tenant, work.created_at_ms)
        if self._lending is not None:
            self._lending.arrived(work.scheduling_tier, work.created_at_ms)

    def put_back(self, work: Work) -> None:
        """`work`'s call was preempted (``preemption.py``): it waits again where it waited, ahead of
        the newer requests of its tier, with its deadline and age (it is not a new arrival: the
        forecast does not count it again)."""
        self._queues[work.scheduling_tier].put_back(work)
        self._count(work, 1)

    def demand(
        self, gates: Mapping[Tier, Callable[[str], bool]] | None = None, now_ms: int | None = None
    ) -> Demand:
        """Per tier, the requests that may start (their tenant passes the tier's gate of `gates`,
        ``start_gates``; by default below its cap) and the oldest of them; with forecast lending and
        `now_ms`, the forecast's outlook at `now_ms`."""
        heads = {t: q.heads((gates or {}).get(t, self.may_start)) for t, q in self._queues.items()}
        outlook = self._lending.at(now_ms) if self._lending is not None and now_ms is not None else None
        return Demand({t: h[0] for t, h in heads.items()}, {t: h[1] for t, h in heads.items()}, outlook)

    def pop(self, scheduling_tier: Tier, may_start: Callable[[str], bool] | None = None) -> Work | None:
        """The next request of the tier by fair share among tenants that may start (`may_start`,
        by default below their cap)."""
        work = self._queues[scheduling_tier].pop(may_start or self.may_start)
        if work is not None:
            self._count(work, -1)
        return work

    def peek(self, scheduling_tier: Tier, may_start: Callable[[str], bool] | None = None) -> Work | None:
        """The request `pop` would return now, left waiting."""
        return self._queues[scheduling_tier].peek(may_start or self.may_start)

    def call_started(self, work: Work, now_ms: int | None = None) -> None:
        """`work` took a token and calls the backend (at `now_ms`, if known): it counts against its
        tenant's cap."""
        self._running[work.request.tenant] += 1
        if now_ms is not None:
            self._calls.started(id(work), work.tier, now_ms)

    def call_ended(self, work: Work, now_ms: int | None = None, *, completed: bool = True) -> None:
        """`work`'s call gave its token back (at `now_ms`, if known; `completed`: with an answer,
        so its time teaches its tier's typical call time)."""
        self._calls.ended(id(work), now_ms, completed=completed)
        tenant = work.request.tenant
        self._running[tenant] -= 1
        if self._running[tenant] <= 0:
            del self._running[tenant]

    def check(self, work: Work, now_ms: int) -> str | None:
        """Why `work` must not start now (a reason to answer EXPIRED), or None if it may."""
        remaining = work.expire_at_ms - now_ms
        if remaining <= 0:
            return TOO_LATE
        if remaining < self.early_drop_ms(work.tier):
            return WOULD_BE_LATE
        return None

    def early_drop_ms(self, tier: Tier) -> float:
        """Less time left than this and a request of `tier` is dropped: its tier's typical call
        time now (learned), or 0 where early drop is off."""
        return self._calls.typical_ms(tier) if tier in self._early_drop_ms else 0.0

    def sweep(self, now_ms: int) -> tuple[list[Expired], int]:
        """Remove expired requests and promote starved LOW ones; returns (expired, promoted count)."""
        expired: list[Expired] = []
        for queue in self._queues.values():
            reasons: dict[int, str] = {}

            def too_late(work: Work, reasons: dict[int, str] = reasons) -> bool:
                reason = self.check(work, now_ms)
                if reason is not None:
                    reasons[id(work)] = reason
                return reason is not None

            for work in queue.remove_if(too_late):
                expired.append(Expired(work, reasons[id(work)]))
                self._count(work, -1)
        age = self._promotion_age_ms
        starved = self._queues[Tier.LOW].remove_if(lambda w: now_ms - w.created_at_ms >= age)
        for work in starved:
            work.promoted = True
        # Promoted requests are older than any MEDIUM one of their tenant: first in its queue.
        self._queues[Tier.MEDIUM].extend_front(starved)
        return expired, len(starved)

    def take_unpromoted_low(self) -> list[Work]:
        """Remove and return the LOW requests waiting in their own tier (never promoted ones)."""
        taken = self._queues[Tier.LOW].clear()
        for work in taken:
            self._count(work, -1)
        return taken

    def drop_sources(self, gone: set[tuple[str, int]]) -> int:
        """Forget requests of revoked partitions (their new owner reads them again); returns how many."""
        dropped = 0
        for queue in self._queues.values():
            for work in queue.remove_if(lambda w: w.source in gone):
                self._count(work, -1)
                dropped += 1
        return dropped

    def clear(self) -> None:
        for queue in self._queues.values():
            queue.clear()
        self._held_by_source_tier = dict.fromkeys(Tier, 0)
        self._held_by_tenant.clear()

    def _count(self, work: Work, delta: int) -> None:
        self._held_by_source_tier[work.tier] += delta
        key = (work.tier, work.request.tenant)
        self._held_by_tenant[key] += delta
        if self._held_by_tenant[key] <= 0:
            del self._held_by_tenant[key]
