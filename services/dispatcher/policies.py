"""Which tier may start its next request now: a pure decision with an injected clock.

Given the hour's window, the effective budget, tokens in use and waiting work per tier, a policy
names the tier whose oldest waiting request may take a token, or None. The dispatcher asks again
after every start, every arrival and every completion, so the decision is one step at a time.
The scheduler only decides what starts; behind a preemptible backend (``preemption.py``) the
dispatcher may cancel a call lent past its tier's ceiling when a higher tier needs its slot.

Policies:

- `TieredScheduler` (inferq): work-conserving. First, a tier with waiting work below its floor
  gets the slot (in priority order), so each tier's guarantee holds as slots free up. Then idle
  capacity is lent in priority order up to each tier's ceiling, except the HIGH headroom: MEDIUM
  and LOW never take the last `high_headroom` free slots. At night LOW may use `low_idle_ceiling`
  (the whole budget) when HIGH and MEDIUM have nothing waiting or running. With forecast lending
  (`INFERQ_DISPATCHER_FORECAST_LENDING`, ``forecast.py``), a tier at its ceiling may still take a free slot
  outside the headroom when the `Demand`'s outlook says the higher tiers will not need it during
  the call (the read-ahead attaches the outlook; without one, the ceilings are the rule). Lending moves
  ceilings, never the headroom: while a tier below holds borrowed slots, MEDIUM below its floor
  waits for one of them to end (lending stops while it waits) rather than take the headroom. On
  the scheduling bench's trace (simulated, seeds 2233, 2024 and 7, briefs lent up to the headroom)
  that floor rule cut HIGH's p99 wait from 66-163 ms to 33-43 ms for 0.5-0.9 s more LOW makespan:
  chat clusters start unforeseen and a brief holds its slot for ten chats, so the headroom is what
  a cluster finds free.
  **Lending without foresight**: the tiers in `preemptible` (every backend they call frees its slot
  when the client hangs up) may take every idle slot past their ceilings, the headroom included,
  with no forecast: a start past the tier's ceiling or into the headroom is **lent** (`next_start`
  says so, and the dispatcher marks the call), and preemption takes a lent call back when a higher
  tier needs its slot. So the headroom HIGH finds is the free slots plus the lent ones; a start
  within a tier's share (its ceiling, outside the headroom) is never preempted, and one of a tier
  that is not preemptible may not bring that below `high_headroom`. Lending never shuts a higher
  tier out, and the headroom goes to MEDIUM before LOW, as every slot does.
- `StaticScheduler` (hard slots, e.g. the peak split 6/3/1): each tier capped at its floor, nothing
  lent. A baseline.
- `FifoScheduler`: one queue in arrival order under the global budget. A baseline.

The effective budget may be below the schedule's (adaptive limits): the window is then squeezed,
LOW first, then MEDIUM, HIGH last (`Window.squeezed`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from inferq.dispatcher.schedule import Schedule, Window
from inferq.messaging.tiers import TIERS_BY_PRIORITY, Tier

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Demand:
    """Waiting work per tier, and when each tier's oldest waiting request was enqueued (epoch ms);
    with forecast lending, the outlook of the demand to come."""

    waiting: Mapping[Tier, int]
    oldest_enqueued_ms: Mapping[Tier, int | None]
    outlook: Outlook | None = None
    # Of `waiting`, the requests that may be lent a slot past their tier's ceiling behind a
    # preemptible backend (not preempted `max_preemptions` times); None: all of them.
    lendable: Mapping[Tier, int] | None = None
    # Per tier, the running calls that were lent their slot (``preempting.py`` marks each at its
    # start): preemption gives them back to HIGH. None: counted as the calls past each ceiling.
    lent: Mapping[Tier, int] | None = None

    @classmethod
    def counts(cls, **waiting: int) -> Demand:
        """Convenience for tests: Demand.counts(HIGH=2, LOW=5)."""
        w = {t: waiting.get(t.value, 0) for t in Tier}
        return cls(w, dict.fromkeys(Tier))


class Outlook(Protocol):
    def may_lend(self, tier: Tier, *, free: int, waiting: Mapping[Tier, int]) -> bool:
        """May `tier` take one of `free` slots past its ceiling (or into the HIGH headroom) now?"""
        ...


class Scheduler(Protocol):
    name: str

    def window(self) -> Window:
        """The window in force now (after any pin)."""
        ...

    def window_for(self, budget: int) -> Window:
        """The window in force, squeezed to the effective `budget`."""
        ...

    def next_tier(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> Tier | None:
        """The tier that may start one request now, given `budget` (the effective budget)."""
        ...

    def next_start(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> tuple[Tier, bool] | None:
        """As `next_tier`, and whether that start is lent its slot (preemption may take it back)."""
        ...


class _ScheduledPolicy:
    """What every policy shares: the schedule and the injected clock that picks its window."""

    def __init__(
        self, schedule: Schedule, clock: Clock = utc_now, preemptible: Collection[Tier] = ()
    ) -> None:
        self._schedule = schedule
        self._clock = clock
        self._preemptible = frozenset(preemptible)

    def window(self) -> Window:
        return self._schedule.window_at(self._clock())

    def window_for(self, budget: int) -> Window:
        """The window in force, squeezed to the effective `budget`."""
        return self.window().squeezed(self._schedule.budget - min(budget, self._schedule.budget))

    def next_tier(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> Tier | None:
        start = self.next_start(in_use, demand, budget)
        return None if start is None else start[0]

    def next_start(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> tuple[Tier, bool] | None:
        tier = self._next(in_use, demand, budget)
        return None if tier is None else (tier, False)

    def _next(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> Tier | None:
        raise NotImplementedError


class TieredScheduler(_ScheduledPolicy):
    name = "inferq"

    def next_start(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> tuple[Tier, bool] | None:
        budget = min(budget, self._schedule.budget)
        free = budget - sum(in_use.values())
        if free <= 0:
            return None
        window = self.window().squeezed(self._schedule.budget - budget)
        waiting = demand.waiting
        headroom = min(window.high_headroom, budget - 1)
        lent = self._past_ceiling_below(window, in_use) if demand.outlook is not None else {}
        for tier in TIERS_BY_PRIORITY:
            if waiting.get(tier, 0) > 0 and in_use.get(tier, 0) < window.limits[tier].floor:
                if tier is not Tier.HIGH and free - 1 < headroom and lent.get(tier, False):
                    continue  # a borrowed slot below it frees up for it instead of the headroom
                return tier, False
        # The headroom HIGH finds: the free slots plus the lent ones (preemption gives those back).
        recoverable = free - 1 + self._lent(window, in_use, demand)
        others_idle = all(waiting.get(t, 0) == 0 and in_use.get(t, 0) == 0 for t in (Tier.HIGH, Tier.MEDIUM))
        for tier in TIERS_BY_PRIORITY:
            if waiting.get(tier, 0) == 0:
                continue
            ceiling = window.limits[tier].ceiling
            idle_low = tier is Tier.LOW and others_idle and window.low_idle_ceiling is not None
            if idle_low and window.low_idle_ceiling is not None:
                ceiling = max(ceiling, window.low_idle_ceiling)
            past_ceiling = in_use.get(tier, 0) >= ceiling
            # The headroom is kept for HIGH: a start within a tier's share may not bring what HIGH
            # finds (free plus lent slots) below it.
            into_headroom = tier is not Tier.HIGH and not idle_low and recoverable < headroom
            if tier in self._preemptible and tier is not Tier.HIGH and (past_ceiling or into_headroom):
                # Lent: past its ceiling or into the headroom, preemption takes it back when needed;
                # but not to a request preempted too often (`lendable`), which waits within its
                # tier's share.
                if demand.lendable is None or demand.lendable.get(tier, 0) > 0:
                    return tier, True
                continue
            if into_headroom or (past_ceiling and not self._lend(tier, free, demand)):
                continue
            return tier, False
        return None

    def _lent(self, window: Window, in_use: Mapping[Tier, int], demand: Demand) -> int:
        """Slots lent to preemptible tiers (preemption gives them back to HIGH): as the demand
        counts them, else the calls past each preemptible tier's ceiling."""
        if demand.lent is not None:
            return sum(n for t, n in demand.lent.items() if t is not Tier.HIGH)
        return sum(
            max(0, in_use.get(t, 0) - window.limits[t].ceiling)
            for t in self._preemptible
            if t is not Tier.HIGH
        )

    @staticmethod
    def _past_ceiling_below(window: Window, in_use: Mapping[Tier, int]) -> dict[Tier, bool]:
        """Per tier: does a tier below it hold slots past its ceiling (borrowed ones)?"""
        below: dict[Tier, bool] = {}
        seen = False
        for tier in reversed(TIERS_BY_PRIORITY):
            below[tier] = seen
            seen = seen or in_use.get(tier, 0) > window.limits[tier].ceiling
        return below

    @staticmethod
    def _lend(tier: Tier, free: int, demand: Demand) -> bool:
        outlook = demand.outlook
        return (
            tier is not Tier.HIGH
            and outlook is not None
            and outlook.may_lend(tier, free=free, waiting=demand.waiting)
        )


class StaticScheduler(_ScheduledPolicy):
    """Hard slots (a baseline): each tier capped at its floor; idle slots are not lent."""

    name = "static"

    def _next(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> Tier | None:
        budget = min(budget, self._schedule.budget)
        if sum(in_use.values()) >= budget:
            return None
        window = self.window().squeezed(self._schedule.budget - budget)
        for tier in TIERS_BY_PRIORITY:
            if demand.waiting.get(tier, 0) > 0 and in_use.get(tier, 0) < window.limits[tier].floor:
                return tier
        return None


class FifoScheduler(_ScheduledPolicy):
    """One queue: the oldest waiting request starts next, whatever its tier."""

    name = "fifo"

    def _next(self, in_use: Mapping[Tier, int], demand: Demand, budget: int) -> Tier | None:
        if sum(in_use.values()) >= min(budget, self._schedule.budget):
            return None
        candidates = [
            (oldest, tier.rank, tier)
            for tier, oldest in demand.oldest_enqueued_ms.items()
            if oldest is not None and demand.waiting.get(tier, 0) > 0
        ]
        return min(candidates)[2] if candidates else None


POLICIES: dict[str, type[TieredScheduler] | type[StaticScheduler] | type[FifoScheduler]] = {
    "inferq": TieredScheduler,
    "static": StaticScheduler,
    "fifo": FifoScheduler,
}


def build_scheduler(
    policy: str, schedule: Schedule, clock: Clock = utc_now, preemptible: Collection[Tier] = ()
) -> Scheduler:
    """`preemptible`: the tiers whose calls may be preempted (only the tiered policy lends them
    every idle slot; the baselines ignore it)."""
    try:
        factory = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}") from None
    return factory(schedule, clock, preemptible)
