"""Per-tier numbers of one run, real or simulated, from its outcomes (pure).

- queue wait: dispatched - enqueued, over the requests that took a token;
- end to end: completed - enqueued, over OK requests (what a caller who got an answer waited);
- throughput: OK outcomes per second of the run (first enqueue to last outcome), so the tiers'
  figures add up to the run's;
- LOW makespan: first LOW enqueue to last LOW outcome (unknown while LOW requests are missing);
- utilization: see `timeseries.Utilization`; max in flight: the peak of tokens in use.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferq.messaging.tiers import TIERS_BY_PRIORITY, Tier
from inferq.tools.measures import MeasuredRequest, Stats, stats
from inferq.tools.report.timeseries import Utilization, tokens_in_use, utilization
from inferq.tools.traces.files import Trace

# The result schema's statuses, in the order tables show them.
STATUSES = ("OK", "EXPIRED", "EVICTED", "REJECTED", "FAILED")


@dataclass(frozen=True)
class RequestCounts:
    """From the run's request records: sent, accepted by ingest, and accepted without an outcome."""

    submitted: int
    accepted: int
    missing: int


@dataclass(frozen=True)
class TierSummary:
    tier: Tier
    outcomes: int
    by_status: dict[str, int]
    queue_wait_s: Stats | None
    end_to_end_s: Stats | None
    throughput_per_s: float | None
    requests: RequestCounts | None = None


@dataclass(frozen=True)
class Summary:
    budget: int
    tiers: list[TierSummary]
    span_s: float | None
    low_makespan_s: float | None
    utilization: Utilization
    max_in_flight: int

    def tier(self, tier: Tier) -> TierSummary:
        return next(row for row in self.tiers if row.tier is tier)


def seconds(values_ms: Sequence[int]) -> Stats | None:
    return stats([v / 1000 for v in values_ms])


def request_counts(trace: Trace, outcomes: Sequence[MeasuredRequest]) -> dict[Tier, RequestCounts]:
    answered = {o.request_id for o in outcomes}
    counts = {}
    for tier in Tier:
        accepted = [a for a in trace.arrivals if a.tier is tier]
        missing = sum(1 for a in accepted if a.request_id not in answered)
        counts[tier] = RequestCounts(trace.submitted(tier), len(accepted), missing)
    return counts


def summarize(
    outcomes: Sequence[MeasuredRequest], budget: int, requests: Mapping[Tier, RequestCounts] | None = None
) -> Summary:
    span_ms = max(o.completed_ms for o in outcomes) - min(o.enqueued_ms for o in outcomes) if outcomes else 0
    rows = []
    for tier in TIERS_BY_PRIORITY:
        mine = [o for o in outcomes if o.tier is tier]
        counts = Counter(o.status for o in mine)
        ok = counts.get("OK", 0)
        rows.append(
            TierSummary(
                tier=tier,
                outcomes=len(mine),
                by_status={s: counts[s] for s in [*STATUSES, *sorted(counts)] if counts.get(s)},
                queue_wait_s=seconds(
                    [o.dispatched_ms - o.enqueued_ms for o in mine if o.dispatched_ms is not None]
                ),
                end_to_end_s=seconds([o.completed_ms - o.enqueued_ms for o in mine if o.status == "OK"]),
                throughput_per_s=ok / (span_ms / 1000) if span_ms else None,
                requests=requests.get(tier) if requests else None,
            )
        )
    return Summary(
        budget=budget,
        tiers=rows,
        span_s=span_ms / 1000 if outcomes else None,
        low_makespan_s=low_makespan_s(outcomes, requests),
        utilization=utilization(outcomes, budget),
        max_in_flight=tokens_in_use(outcomes).peak,
    )


def low_makespan_s(
    outcomes: Sequence[MeasuredRequest], requests: Mapping[Tier, RequestCounts] | None = None
) -> float | None:
    if requests is not None and requests[Tier.LOW].missing:
        return None  # LOW has not finished: its makespan is not known yet
    low = [o for o in outcomes if o.tier is Tier.LOW]
    if not low:
        return None
    return (max(o.completed_ms for o in low) - min(o.enqueued_ms for o in low)) / 1000
