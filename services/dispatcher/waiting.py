"""The read-ahead: requests taken from Kafka that wait for a token, by scheduling tier.

Small by design (bounded per tier by the dispatcher's pause rule): the real backlog waits in
Kafka. Two timers act on it: expiry (a request past its deadline, or with less time left than its
tier's typical inference takes, is answered EXPIRED and never costs an LLM call) and aging (a LOW
request older than the promotion age is scheduled as MEDIUM, so briefs always progress).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from services.dispatcher.policies import Demand
from services.dispatcher.work import Work
from services.messaging.tiers import Tier

TOO_LATE = "deadline passed"
WOULD_BE_LATE = "less time left than the tier's typical inference"


@dataclass(frozen=True)
class Expired:
    work: Work
    reason: str


class WaitingRoom:
    def __init__(self, *, promotion_age_ms: int, early_drop_ms: Mapping[Tier, int] | None = None) -> None:
        self._queues: dict[Tier, deque[Work]] = {t: deque() for t in Tier}
        self._promotion_age_ms = promotion_age_ms
        self._early_drop_ms = dict(early_drop_ms or {})
        self._held_by_source_tier: dict[Tier, int] = dict.fromkeys(Tier, 0)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def held(self, source_tier: Tier) -> int:
        """Requests read from `source_tier`'s topic and not yet started (promoted ones included)."""
        return self._held_by_source_tier[source_tier]

    def add(self, work: Work) -> None:
        self._queues[work.scheduling_tier].append(work)
        self._held_by_source_tier[work.tier] += 1

    def demand(self) -> Demand:
        return Demand(
            {t: len(q) for t, q in self._queues.items()},
            {t: (q[0].created_at_ms if q else None) for t, q in self._queues.items()},
        )

    def pop(self, scheduling_tier: Tier) -> Work | None:
        queue = self._queues[scheduling_tier]
        if not queue:
            return None
        work = queue.popleft()
        self._held_by_source_tier[work.tier] -= 1
        return work

    def check(self, work: Work, now_ms: int) -> str | None:
        """Why `work` must not start now (a reason to answer EXPIRED), or None if it may."""
        remaining = work.expire_at_ms - now_ms
        if remaining <= 0:
            return TOO_LATE
        if remaining < self._early_drop_ms.get(work.tier, 0):
            return WOULD_BE_LATE
        return None

    def sweep(self, now_ms: int) -> tuple[list[Expired], int]:
        """Remove expired requests and promote starved LOW ones; returns (expired, promoted count)."""
        expired: list[Expired] = []
        for tier, queue in self._queues.items():
            keep: deque[Work] = deque()
            for work in queue:
                reason = self.check(work, now_ms)
                if reason is None:
                    keep.append(work)
                else:
                    expired.append(Expired(work, reason))
                    self._held_by_source_tier[work.tier] -= 1
            self._queues[tier] = keep
        starved = [w for w in self._queues[Tier.LOW] if now_ms - w.created_at_ms >= self._promotion_age_ms]
        if starved:
            starved_ids = {id(w) for w in starved}
            self._queues[Tier.LOW] = deque(w for w in self._queues[Tier.LOW] if id(w) not in starved_ids)
            for work in starved:
                work.promoted = True
            # Promoted requests are older than any MEDIUM one waiting: they go to the front, oldest first.
            merged = sorted(
                [*starved, *self._queues[Tier.MEDIUM]], key=lambda w: (not w.promoted, w.created_at_ms)
            )
            self._queues[Tier.MEDIUM] = deque(merged)
        return expired, len(starved)

    def take_unpromoted_low(self) -> list[Work]:
        """Remove and return the LOW requests waiting in their own tier (never promoted ones)."""
        taken = list(self._queues[Tier.LOW])
        self._queues[Tier.LOW].clear()
        self._held_by_source_tier[Tier.LOW] -= len(taken)
        return taken

    def drop_sources(self, gone: set[tuple[str, int]]) -> int:
        """Forget requests of revoked partitions (their new owner reads them again); returns how many."""
        dropped = 0
        for tier, queue in self._queues.items():
            keep = deque(w for w in queue if w.source not in gone)
            for work in queue:
                if work.source in gone:
                    self._held_by_source_tier[work.tier] -= 1
                    dropped += 1
            self._queues[tier] = keep
        return dropped

    def clear(self) -> None:
        for queue in self._queues.values():
            queue.clear()
        self._held_by_source_tier = dict.fromkeys(Tier, 0)
