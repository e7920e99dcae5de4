"""Time series binned for plots people read at a glance (pure, integer ms in, floats out).

- tokens in use per bin: the time-weighted mean of the calls in flight over each bin (a call
  running half a bin counts 0.5), so a minute of traffic is 60 values per tier, not a spike per start
  and per completion;
- queue-wait quantiles per bin: P50/P95/P99 of the waits that ended (were dispatched) in each bin,
  the way a Prometheus histogram reports them at the time it is read;
- the effective budget as a step function of time (from Prometheus, when the run has one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from inferq.messaging.tiers import Tier
from inferq.tools.measures import MeasuredRequest, percentile
from inferq.tools.report.timeseries import busy_spans

QUANTILES = (50, 95, 99)


@dataclass(frozen=True)
class Bins:
    """`count` bins of `width_ms` from `origin_ms`."""

    origin_ms: int
    width_ms: int
    count: int

    def __post_init__(self) -> None:
        if self.width_ms < 1 or self.count < 0:
            raise ValueError(f"bins need width_ms >= 1 and count >= 0, got {self.width_ms}, {self.count}")

    @classmethod
    def covering(
        cls, outcomes: Sequence[MeasuredRequest], width_ms: int, origin_ms: int | None = None
    ) -> Bins:
        """Bins from the first enqueue (or `origin_ms`) to the last completion."""
        if not outcomes:
            return cls(origin_ms or 0, width_ms, 0)
        start = min(o.enqueued_ms for o in outcomes) if origin_ms is None else origin_ms
        end = max(o.completed_ms for o in outcomes)
        return cls(start, width_ms, max(1, math.ceil((end - start) / width_ms)))

    def index(self, t_ms: int) -> int | None:
        i = (t_ms - self.origin_ms) // self.width_ms
        return i if 0 <= i < self.count else None

    def centers_s(self) -> list[float]:
        """Each bin's middle in seconds since the origin."""
        return [(i + 0.5) * self.width_ms / 1000 for i in range(self.count)]

    def starts_s(self) -> list[float]:
        return [i * self.width_ms / 1000 for i in range(self.count)]


def mean_in_use(spans: Iterable[tuple[int, int]], bins: Bins) -> list[float]:
    """Time-weighted mean number of `spans` ([start, end) ms) open in each bin."""
    area = [0] * bins.count
    for start, end in spans:
        if end <= start:
            continue
        first = max(0, (start - bins.origin_ms) // bins.width_ms)
        last = min(bins.count - 1, (end - 1 - bins.origin_ms) // bins.width_ms)
        for i in range(first, last + 1):
            lo = bins.origin_ms + i * bins.width_ms
            overlap = min(end, lo + bins.width_ms) - max(start, lo)
            if overlap > 0:
                area[i] += overlap
    return [a / bins.width_ms for a in area]


def tokens_by_tier(outcomes: Sequence[MeasuredRequest], bins: Bins) -> dict[Tier, list[float]]:
    """Mean tokens in use per bin, per tier (OK requests, dispatched..completed, as `timeseries`)."""
    return {tier: mean_in_use(busy_spans(outcomes, tier), bins) for tier in Tier}


def wait_quantiles(
    outcomes: Iterable[MeasuredRequest], tier: Tier, bins: Bins, quantiles: Sequence[int] = QUANTILES
) -> dict[int, list[float | None]]:
    """Per quantile, the queue wait in seconds of `tier`'s requests dispatched in each bin (None
    for a bin where none was)."""
    waits: list[list[float]] = [[] for _ in range(bins.count)]
    for o in outcomes:
        if o.tier is tier and o.dispatched_ms is not None:
            i = bins.index(o.dispatched_ms)
            if i is not None:
                waits[i].append((o.dispatched_ms - o.enqueued_ms) / 1000)
    return {q: [percentile(w, q) if w else None for w in waits] for q in quantiles}


def auto_width_ms(outcomes: Sequence[MeasuredRequest], *, target_bins: int, minimum_ms: int = 1_000) -> int:
    """A bin width giving about `target_bins` bins over the run, in whole seconds, at least `minimum_ms`."""
    if not outcomes:
        return minimum_ms
    span = max(o.completed_ms for o in outcomes) - min(o.enqueued_ms for o in outcomes)
    width = math.ceil(span / max(1, target_bins) / 1000) * 1000
    return max(minimum_ms, width)


@dataclass(frozen=True)
class BudgetSteps:
    """The effective budget over time: `values[i]` from `times_ms[i]` on."""

    times_ms: tuple[int, ...]
    values: tuple[float, ...]

    @classmethod
    def from_pairs(cls, pairs: Iterable[Sequence[float]]) -> BudgetSteps:
        ordered = sorted((int(t), float(v)) for t, v in pairs)
        return cls(tuple(t for t, _ in ordered), tuple(v for _, v in ordered))

    def as_pairs(self) -> list[list[float]]:
        return [[t, v] for t, v in zip(self.times_ms, self.values, strict=True)]


def effective_budget_of(params: Mapping[str, object]) -> BudgetSteps | None:
    """The effective budget a document carries (`params["effective_budget"]`: [[t_ms, value]...])."""
    raw = params.get("effective_budget")
    if not isinstance(raw, list) or not raw:
        return None
    try:
        return BudgetSteps.from_pairs(raw)
    except (TypeError, ValueError):
        return None
