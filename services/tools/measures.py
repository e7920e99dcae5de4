"""Pure analysis of one benchmark run: percentiles, LOW makespan and time-weighted utilization.

Utilization "of the budget while work waits" is measured over the periods when at least one
accepted request waits (enqueued, not yet dispatched): the token-seconds in use divided by the
token-seconds the policy allowed. What the policy allows at a moment is found by replaying that
moment's state (tokens in use and waiting work per tier) through the dispatcher's own pure
scheduler, starting requests until `next_tier` says no (`allowed_by`). A perfect dispatcher scores
100%; the time a request spends in Kafka before the dispatcher has fetched it counts as waiting, so
the pipeline's own latency shows up as lost utilization.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from inferq.dispatcher.policies import Demand, Scheduler
from inferq.messaging.records import InferenceResult
from inferq.messaging.tiers import Tier

# (tokens in use, waiting count, oldest waiting enqueue ms, budget) -> tokens the policy allows in use.
AllowedFn = Callable[[Mapping[Tier, int], Mapping[Tier, int], Mapping[Tier, int | None], int], int]


@dataclass(frozen=True)
class MeasuredRequest:
    """The terminal result of one request, times in epoch ms (dispatcher clock)."""

    request_id: str
    tier: Tier
    status: str
    enqueued_ms: int
    dispatched_ms: int | None
    completed_ms: int
    # The request's tenant (the result's; "default" for open mode and records from before tenants).
    tenant: str = "default"

    @classmethod
    def from_result(cls, result: InferenceResult) -> MeasuredRequest:
        return cls(
            request_id=result.request_id,
            tier=result.tier,
            status=result.status.value,
            enqueued_ms=result.enqueued_at_ms,
            dispatched_ms=result.dispatched_at_ms,
            completed_ms=result.completed_at_ms,
            tenant=result.tenant,
        )


@dataclass(frozen=True)
class Stats:
    count: int
    mean: float
    p50: float
    p95: float
    p99: float


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stats(values: Sequence[float]) -> Stats | None:
    if not values:
        return None
    return Stats(
        count=len(values),
        mean=sum(values) / len(values),
        p50=percentile(values, 50),
        p95=percentile(values, 95),
        p99=percentile(values, 99),
    )


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are known (not None); None when none is."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def makespan_s(start_ms: int | None, completions_ms: Sequence[int]) -> float | None:
    """Seconds from `start_ms` to the last completion; None when either end is unknown."""
    if start_ms is None or not completions_ms:
        return None
    return (max(completions_ms) - start_ms) / 1000


@dataclass(frozen=True)
class Interval:
    start_ms: int
    end_ms: int
    tier: Tier
    # For waiting intervals: when the request was enqueued (the FIFO policy serves the oldest first).
    enqueued_ms: int = 0


def scheduling_tier(tier: Tier, waited_ms: int, promotion_age_ms: int) -> Tier:
    """A LOW request that waited past the promotion age is scheduled, and takes its token, as MEDIUM."""
    return Tier.MEDIUM if tier is Tier.LOW and waited_ms >= promotion_age_ms else tier


def waiting_intervals(outcomes: Sequence[MeasuredRequest], promotion_age_ms: int) -> list[Interval]:
    """Enqueued → dispatched (or → the outcome, for a request never dispatched); a promoted LOW
    request waits as LOW up to its promotion, then as MEDIUM."""
    out: list[Interval] = []
    for o in outcomes:
        end = o.dispatched_ms if o.dispatched_ms is not None else o.completed_ms
        if end <= o.enqueued_ms:
            continue
        promote_at = o.enqueued_ms + promotion_age_ms
        if o.tier is Tier.LOW and end > promote_at:
            out.append(Interval(o.enqueued_ms, promote_at, Tier.LOW, o.enqueued_ms))
            out.append(Interval(promote_at, end, Tier.MEDIUM, o.enqueued_ms))
        else:
            out.append(Interval(o.enqueued_ms, end, o.tier, o.enqueued_ms))
    return out


def busy_intervals(outcomes: Sequence[MeasuredRequest], promotion_age_ms: int) -> list[Interval]:
    """Dispatched → completed for every request that took a token (OK, and FAILED after a call)."""
    out: list[Interval] = []
    for o in outcomes:
        if o.dispatched_ms is None or o.completed_ms <= o.dispatched_ms:
            continue
        tier = scheduling_tier(o.tier, o.dispatched_ms - o.enqueued_ms, promotion_age_ms)
        out.append(Interval(o.dispatched_ms, o.completed_ms, tier))
    return out


def allowed_by(scheduler: Scheduler) -> AllowedFn:
    """Tokens the policy allows in use: start requests through `scheduler` until it says no."""

    def allowed(
        in_use: Mapping[Tier, int],
        waiting: Mapping[Tier, int],
        oldest: Mapping[Tier, int | None],
        budget: int,
    ) -> int:
        used = dict(in_use)
        left = dict(waiting)
        for _ in range(budget + 1):  # each step starts one request; at most `budget` can start
            tier = scheduler.next_tier(used, Demand(left, oldest), budget)
            if tier is None:
                break
            used[tier] = used.get(tier, 0) + 1
            left[tier] -= 1
        return sum(used.values())

    return allowed


@dataclass(frozen=True)
class Utilization:
    waiting_s: float  # time with at least one request waiting
    span_s: float  # first enqueue to last completion
    used_token_s_waiting: float
    allowed_token_s_waiting: float
    vs_allowed_waiting: float | None  # used / allowed while work waits
    vs_budget_waiting: float | None  # used / budget while work waits
    vs_budget_span: float | None  # used / budget over the whole span


def utilization(
    waiting: Sequence[Interval],
    busy: Sequence[Interval],
    allowed: AllowedFn,
    budget: int,
    budget_changes: Sequence[tuple[int, int]] = (),
) -> Utilization:
    """Sweep the timeline; between two consecutive event times the state is constant.

    `budget_changes` are (epoch ms, effective budget) samples (adaptive limits); before the first
    one, and without any, the budget is `budget`.
    """
    deltas: dict[int, list[tuple[str, Tier, int, int]]] = {}
    for iv in waiting:
        deltas.setdefault(iv.start_ms, []).append(("wait", iv.tier, +1, iv.enqueued_ms))
        deltas.setdefault(iv.end_ms, []).append(("wait", iv.tier, -1, iv.enqueued_ms))
    for iv in busy:
        deltas.setdefault(iv.start_ms, []).append(("busy", iv.tier, +1, 0))
        deltas.setdefault(iv.end_ms, []).append(("busy", iv.tier, -1, 0))
    for at_ms, _ in budget_changes:
        deltas.setdefault(at_ms, [])
    changes = sorted(budget_changes)
    times = sorted(deltas)
    in_use = dict.fromkeys(Tier, 0)
    queued: dict[Tier, list[int]] = {t: [] for t in Tier}  # sorted enqueue times of waiting requests
    waiting_ms = used_w = allowed_w = used_all = 0.0
    for at_ms, next_ms in itertools.pairwise(times):
        for kind, tier, sign, enq in deltas[at_ms]:
            if kind == "busy":
                in_use[tier] += sign
            elif sign > 0:
                bisect.insort(queued[tier], enq)
            else:
                queued[tier].pop(bisect.bisect_left(queued[tier], enq))
        dt = next_ms - at_ms
        used = sum(in_use.values())
        used_all += used * dt
        if any(queued.values()):
            i = bisect.bisect_right(changes, (at_ms, math.inf)) - 1
            now_budget = changes[i][1] if i >= 0 else budget
            counts = {t: len(q) for t, q in queued.items()}
            oldest = {t: (q[0] if q else None) for t, q in queued.items()}
            waiting_ms += dt
            used_w += used * dt
            allowed_w += allowed(in_use, counts, oldest, now_budget) * dt
    span_ms = (times[-1] - times[0]) if times else 0
    return Utilization(
        waiting_s=waiting_ms / 1000,
        span_s=span_ms / 1000,
        used_token_s_waiting=used_w / 1000,
        allowed_token_s_waiting=allowed_w / 1000,
        vs_allowed_waiting=used_w / allowed_w if allowed_w else None,
        vs_budget_waiting=used_w / (budget * waiting_ms) if waiting_ms else None,
        vs_budget_span=used_all / (budget * span_ms) if span_ms else None,
    )
