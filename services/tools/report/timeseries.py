"""Step functions over a run's timeline, built from outcomes' timestamps (pure, integer ms).

- tokens in use: OK requests between dispatched_at and completed_at. Only OK ones: a FAILED
  result's dispatched..completed may span retries and backoffs during which no token was held.
- backlog: requests enqueued and not yet dispatched (a request never dispatched, e.g. EXPIRED,
  waits until its outcome).
- queue wait points: (enqueued, dispatched - enqueued) for every dispatched request.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from inferq.messaging.tiers import Tier
from inferq.tools.measures import MeasuredRequest

Span = tuple[int, int]


@dataclass(frozen=True)
class Step:
    """A right-continuous step function: `values[i]` holds from `times[i]` until `times[i + 1]`;
    0 before the first time. The last value is 0 when every interval has ended."""

    times: list[int]
    values: list[int]

    def at(self, t_ms: int) -> int:
        level = 0
        for time, value in zip(self.times, self.values, strict=True):
            if time > t_ms:
                break
            level = value
        return level

    @property
    def peak(self) -> int:
        return max(self.values, default=0)


def count_over_time(spans: Iterable[Span]) -> Step:
    """How many of `spans` ([start, end) in ms) are open at each instant; empty spans are ignored."""
    deltas: dict[int, int] = {}
    for start, end in spans:
        if end > start:
            deltas[start] = deltas.get(start, 0) + 1
            deltas[end] = deltas.get(end, 0) - 1
    times = sorted(t for t, delta in deltas.items() if delta)  # a release and a take at once: no change
    values = list(itertools.accumulate(deltas[t] for t in times))
    return Step(times, values)


def busy_spans(outcomes: Iterable[MeasuredRequest], tier: Tier | None = None) -> list[Span]:
    return [
        (o.dispatched_ms, o.completed_ms)
        for o in outcomes
        if o.status == "OK" and o.dispatched_ms is not None and (tier is None or o.tier is tier)
    ]


def waiting_spans(outcomes: Iterable[MeasuredRequest], tier: Tier | None = None) -> list[Span]:
    return [
        (o.enqueued_ms, o.dispatched_ms if o.dispatched_ms is not None else o.completed_ms)
        for o in outcomes
        if tier is None or o.tier is tier
    ]


def tokens_in_use(outcomes: Sequence[MeasuredRequest], tier: Tier | None = None) -> Step:
    return count_over_time(busy_spans(outcomes, tier))


def backlog(outcomes: Sequence[MeasuredRequest], tier: Tier | None = None) -> Step:
    return count_over_time(waiting_spans(outcomes, tier))


def wait_points(outcomes: Iterable[MeasuredRequest], tier: Tier) -> list[tuple[int, int]]:
    """(enqueued ms, queue wait ms) of every dispatched request of `tier`, in enqueue order."""
    return sorted(
        (o.enqueued_ms, o.dispatched_ms - o.enqueued_ms)
        for o in outcomes
        if o.tier is tier and o.dispatched_ms is not None
    )


@dataclass(frozen=True)
class Utilization:
    """Tokens in use as a share of the budget, time-weighted: over the whole run (first enqueue
    to last outcome) and over the time when at least one request waited for a token."""

    span_ms: int
    waiting_ms: int
    token_ms: int  # area under tokens-in-use over the run
    token_ms_waiting: int  # the same, only while work waited
    budget: int

    @property
    def over_run(self) -> float | None:
        return self.token_ms / (self.budget * self.span_ms) if self.span_ms else None

    @property
    def while_waiting(self) -> float | None:
        return self.token_ms_waiting / (self.budget * self.waiting_ms) if self.waiting_ms else None


def utilization(outcomes: Sequence[MeasuredRequest], budget: int) -> Utilization:
    """Sweep the two step functions (tokens in use, backlog) together; between two change points
    both are constant."""
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    busy, waiting = tokens_in_use(outcomes), backlog(outcomes)
    busy_at = dict(zip(busy.times, busy.values, strict=True))
    waiting_at = dict(zip(waiting.times, waiting.values, strict=True))
    token_ms = token_ms_waiting = waiting_ms = used = queued = 0
    for at, following in itertools.pairwise(sorted(busy_at.keys() | waiting_at.keys())):
        used, queued = busy_at.get(at, used), waiting_at.get(at, queued)
        token_ms += used * (following - at)
        if queued > 0:
            waiting_ms += following - at
            token_ms_waiting += used * (following - at)
    span_ms = max(o.completed_ms for o in outcomes) - min(o.enqueued_ms for o in outcomes) if outcomes else 0
    return Utilization(span_ms, waiting_ms, token_ms, token_ms_waiting, budget)
