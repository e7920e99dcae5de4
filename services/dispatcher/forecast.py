"""Forecast lending: a tier borrows an idle slot past its ceiling when higher tiers will not need it.

The seed's ceilings keep LOW to 1 slot at peak and keep the last `high_headroom` slots from MEDIUM
and LOW, whatever the demand: after a chat burst, nine slots may idle while briefs wait (issue 14).
With `INFERQ_DISPATCHER_FORECAST_LENDING`, the scheduler (``policies.py``) may start a request of a tier past
its ceiling, never into the HIGH headroom, when this forecast says the higher tiers' demand over the
borrowed call's expected duration still finds free slots (`INFERQ_DISPATCHER_FORECAST_LENDING`, off by
default since issue 22: a lent call holds its slot when an analysis surge arrives, which the forecast,
weighing chat, cannot foresee; docs/benchmarks/scheduling.md has the figures):

- **Arrivals per tier** (`ArrivalForecast`): counts per interval (each tier's configured typical
  call time, so an interval's count is the concurrency that tier's arrivals ask for), their mean
  and variance as exponentially weighted moments (weight `weight` per interval; quiet intervals
  count as zeros), and a fast mean (`recent_weight`) that follows a burst in progress. The upper
  bound of the arrivals within `t` ms is the larger of the two means x t, plus `z` standard
  deviations, plus the arrivals of the interval under way beyond the mean (a burst goes on).
- **The borrow** (`Lending.may_lend`): the call holds its slot for its tier's typical time D
  (learned, ``call_times.py``). For every running call expected to end within D (and at D), the
  higher tiers' upper-bound arrivals until then, each holding a slot for its own tier's typical
  time, must fit in the slots free after the borrow plus the calls expected to have ended; and
  `min_free` slots always stay free. A higher tier with work waiting forbids it outright.
- **Start conservative**: until HIGH has been observed for `warmup_intervals` of its intervals,
  nothing is lent past the ceilings (the seed's behaviour).
- **Whose demand**: the headroom is HIGH's, so the forecast weighs chat's arrivals; MEDIUM's
  guarantee is its floor (served first as slots free up), and MEDIUM work waiting forbids lending
  to LOW.

Only ever an extra permission beside the ceilings, asked after the floors: floors and the budget
hold as before. Pure and clock-injected: arrivals and calls are dated by the caller's epoch ms
(the dispatcher's clock, the simulator's), and the read-ahead (``readahead.py``) feeds both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from inferq.dispatcher.call_times import CallTimes
from inferq.messaging.tiers import TIERS_BY_PRIORITY, Tier


@dataclass(frozen=True)
class ForecastPolicy:
    # Weight of one interval in the moving moments (0.05: the last ~20 intervals count most).
    weight: float = 0.05
    # Standard deviations of the count above its mean: a margin for bursts beyond those the fast
    # mean and the interval under way show. On the scheduling bench's trace (simulated, seeds 2233,
    # 2024 and 7, the headroom kept from lending) z = 1 against z = 0: HIGH p99 wait 40 / 34 / 25 ms
    # against 43 / 33 / 38, LOW makespan 21.4 / 22.4 / 23.0 s against 21.3 / 22.5 / 22.8, budget
    # used while work waits 81% either way; z = 3 buys little more tail (40 / 19 / 21 ms) for 25-28 s.
    z: float = 1.0
    # Weight of one interval in the fast mean that follows a burst in progress (a cluster of chats
    # raises it at once; it falls back within a few intervals).
    recent_weight: float = 0.5
    # Slots a borrow always leaves free: the first chat of a cluster cannot be foreseen. The HIGH
    # headroom is never lent (``policies.py``), so this matters only where it is smaller.
    min_free: int = 1
    # Intervals HIGH is observed before anything is lent (5 of its call times: 2.5 s at 0.5 s chats).
    warmup_intervals: int = 5

    def __post_init__(self) -> None:
        if not 0 < self.weight <= 1 or not 0 < self.recent_weight <= 1:
            raise ValueError("need 0 < weight <= 1 and 0 < recent_weight <= 1")
        if self.z < 0 or self.warmup_intervals < 0 or self.min_free < 0:
            raise ValueError("need z, warmup_intervals and min_free >= 0")


class _Moments:
    """One tier's arrivals per interval: the interval under way and the moments of the past ones."""

    def __init__(self, interval_ms: int, start_ms: int) -> None:
        self.interval_ms = interval_ms
        self.index = start_ms // interval_ms
        self.first = self.index
        self.count = 0
        self.mean = 0.0
        self.square = 0.0
        # A fast-moving mean: a cluster of arrivals in progress raises it for a few intervals.
        self.recent = 0.0

    def roll(self, now_ms: int, weight: float, recent_weight: float) -> None:
        """Close the intervals before the one holding `now_ms` (those without arrivals count 0)."""
        index = now_ms // self.interval_ms
        if index <= self.index:
            return
        self.mean += weight * (self.count - self.mean)
        self.square += weight * (self.count * self.count - self.square)
        self.recent += recent_weight * (self.count - self.recent)
        decay = (1 - weight) ** (index - self.index - 1)
        self.mean *= decay
        self.square *= decay
        self.recent *= (1 - recent_weight) ** (index - self.index - 1)
        self.index, self.count = index, 0


class ArrivalForecast:
    def __init__(self, interval_ms: Mapping[Tier, float], policy: ForecastPolicy | None = None) -> None:
        self.policy = policy or ForecastPolicy()
        self._interval = {t: max(1, round(interval_ms.get(t, 1000))) for t in Tier}
        self._tiers: dict[Tier, _Moments] | None = None

    def _at(self, now_ms: int) -> dict[Tier, _Moments]:
        if self._tiers is None:  # observation starts at the first event, for every tier at once
            self._tiers = {t: _Moments(self._interval[t], now_ms) for t in Tier}
        for moments in self._tiers.values():
            moments.roll(now_ms, self.policy.weight, self.policy.recent_weight)
        return self._tiers

    def arrived(self, tier: Tier, at_ms: int) -> None:
        """A request of `tier` arrived at `at_ms` (a late one counts in the interval under way)."""
        self._at(at_ms)[tier].count += 1

    def ready(self, tier: Tier, now_ms: int) -> bool:
        """`tier` has been observed long enough for its forecast to be trusted."""
        moments = self._at(now_ms)[tier]
        return moments.index - moments.first >= self.policy.warmup_intervals

    def upper(self, tier: Tier, within_ms: float, now_ms: int) -> float:
        """Upper bound of `tier`'s arrivals within the next `within_ms`."""
        moments = self._at(now_ms)[tier]
        share = max(0.0, within_ms) / moments.interval_ms
        variance = max(moments.square - moments.mean * moments.mean, moments.mean)
        burst = max(0.0, moments.count - moments.mean)
        rate = max(moments.mean, moments.recent)
        return rate * share + self.policy.z * math.sqrt(variance * share) + burst


class Lending:
    """What the scheduler asks (`policies.Outlook`): may `tier` borrow one more slot now?"""

    def __init__(self, arrivals: ArrivalForecast, calls: CallTimes) -> None:
        self.arrivals = arrivals
        self.calls = calls

    def arrived(self, tier: Tier, at_ms: int) -> None:
        self.arrivals.arrived(tier, at_ms)

    def at(self, now_ms: int) -> Outlook:
        return Outlook(self, now_ms)


@dataclass(frozen=True)
class Outlook:
    """The forecast as seen at `now_ms`, handed to the scheduler inside its `Demand`."""

    lending: Lending
    now_ms: int

    def may_lend(self, tier: Tier, *, free: int, waiting: Mapping[Tier, int]) -> bool:
        higher = TIERS_BY_PRIORITY[: TIERS_BY_PRIORITY.index(tier)]
        if free < 1:
            return False
        if not higher:
            return True  # nobody to keep a slot for (the scheduler never asks for HIGH)
        arrivals, calls, now = self.lending.arrivals, self.lending.calls, self.now_ms
        if any(waiting.get(h, 0) > 0 for h in higher) or not arrivals.ready(Tier.HIGH, now):
            return False
        borrowed_ms = calls.typical_ms(tier)

        def need(within_ms: float) -> float:
            # The headroom is HIGH's (MEDIUM's guarantee is its floor, served first as slots free):
            # a chat holds its slot for its own call time, so only the chats arriving within that
            # long before the checkpoint still hold one.
            return arrivals.upper(Tier.HIGH, min(within_ms, calls.typical_ms(Tier.HIGH)), now)

        free_after = free - 1
        if free_after < arrivals.policy.min_free:
            return False
        ended = 0
        for remaining in calls.remaining_ms(now):
            if remaining >= borrowed_ms:
                break
            if need(remaining) > free_after + ended:
                return False
            ended += 1
        return need(borrowed_ms) <= free_after + ended


def forecast_lending(calls: CallTimes, policy: ForecastPolicy | None = None) -> Lending:
    """Forecast lending over `calls`, each tier's arrivals counted per its configured call time."""
    return Lending(ArrivalForecast({t: calls.default_ms(t) for t in Tier}, policy), calls)
