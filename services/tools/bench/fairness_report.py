"""The fairness bench's figures from what a run recorded, its targets and its tables (pure).

- per tenant and tier: `summary.tier_rows` over that tenant's submissions (waits = dispatched -
  enqueued; refusals are ingest's 429s);
- B's LOW completions over time, in bins of wall clock from the trace's start;
- LOW's split while both tenants have briefs waiting: each brief dispatched at a moment when both
  tenants had a brief waiting (enqueued, not yet dispatched; time in Kafka counts) is a start the
  fair queue chose between them; its completion counts for its tenant. B's part of those is compared
  with its weight share.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferq.messaging.tiers import Tier
from inferq.tools.bench.machine import (
    MISS,
    TARGET_HEAD,
    Column,
    columns_table,
    figure,
    outcomes,
    table,
    verdict,
)
from inferq.tools.bench.summary import REFUSED, Submission, TierRow, tier_rows
from inferq.tools.measures import MeasuredRequest, Stats, stats
from inferq.tools.report.timeseries import tokens_in_use

# Targets (issue 10): B's HIGH p95 wait with A present at most this much above B alone (ms of the
# compressed run), and B's part of LOW while both wait within this fraction of its weight share.
HIGH_P95_MARGIN_MS = 10.0
SHARE_TOLERANCE = 0.10


@dataclass(frozen=True)
class LowSplit:
    """LOW starts made while both tenants had briefs waiting, by tenant, completed."""

    tenant: str  # whose share `share` is
    counted: dict[str, int]
    share: float | None

    @property
    def total(self) -> int:
        return sum(self.counted.values())


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    threshold: str
    verdict: str


def of_tenant(submissions: Sequence[Submission], tenant: str) -> list[Submission]:
    return [s for s in submissions if s.tenant == tenant]


def tenant_rows(
    submissions: Sequence[Submission], outcomes: Mapping[str, MeasuredRequest], tenant: str
) -> list[TierRow]:
    return tier_rows(of_tenant(submissions, tenant), outcomes)


@dataclass(frozen=True)
class FullBackendArrivals:
    """A tenant's dispatched requests of a tier, and those enqueued while every slot was busy."""

    dispatched: int
    at_full: int
    wait_ms: Stats | None  # of those at full
    to_first_end_ms: Stats | None  # enqueue -> the first call's end after it, of those at full


def arrivals_at_full_backend(
    submissions: Sequence[Submission],
    outcomes: Mapping[str, MeasuredRequest],
    tenant: str,
    tier: Tier,
    budget: int,
) -> FullBackendArrivals:
    everything = list(outcomes.values())
    in_use = tokens_in_use(everything)
    ends = sorted(o.completed_ms for o in everything if o.status == "OK" and o.dispatched_ms is not None)
    mine = [
        outcomes[s.request_id]
        for s in of_tenant(submissions, tenant)
        if s.tier is tier and s.request_id in outcomes and outcomes[s.request_id].dispatched_ms is not None
    ]
    waits: list[float] = []
    to_end: list[float] = []
    for o in mine:
        if in_use.at(o.enqueued_ms) < budget or o.dispatched_ms is None:
            continue
        waits.append(float(o.dispatched_ms - o.enqueued_ms))
        after = bisect.bisect_right(ends, o.enqueued_ms)
        if after < len(ends):
            to_end.append(float(ends[after] - o.enqueued_ms))
    return FullBackendArrivals(len(mine), len(waits), stats(waits), stats(to_end))


def refusal_kind(submission: Submission) -> str:
    """Why ingest refused: the tenant's share of the tier's backlog, the tier full, the tenant's rate,
    or what else (from the answer's text, which names its quota)."""
    text = submission.error or ""
    if submission.status == 503:
        return "kafka"
    if "over its share" in text:
        return "share"
    if "over capacity" in text:
        return "tier full"
    if "requests per minute" in text:
        return "rate"
    return "other"


def refusals(submissions: Sequence[Submission], tenant: str) -> dict[Tier, dict[str, int]]:
    """Per tier, the tenant's refusals by kind."""
    counts: dict[Tier, Counter[str]] = {}
    for s in of_tenant(submissions, tenant):
        if s.status in REFUSED:
            counts.setdefault(s.tier, Counter())[refusal_kind(s)] += 1
    return {tier: dict(sorted(c.items())) for tier, c in counts.items()}


def _briefs(
    submissions: Sequence[Submission], outcomes: Mapping[str, MeasuredRequest]
) -> list[MeasuredRequest]:
    """Outcomes of the requests ingest put on LOW (a promoted one is reported in the tier it ran in)."""
    return [outcomes[s.request_id] for s in submissions if s.tier is Tier.LOW and s.request_id in outcomes]


def low_completions_over_time(
    submissions: Sequence[Submission],
    outcomes: Mapping[str, MeasuredRequest],
    tenant: str,
    *,
    start_ms: int,
    bin_s: float,
    bins: int,
) -> list[int]:
    """OK briefs of `tenant` completed in each `bin_s` from `start_ms`; the last bin takes the rest."""
    counts = [0] * bins
    for o in _briefs(of_tenant(submissions, tenant), outcomes):
        if o.status == "OK":
            index = max(0, int((o.completed_ms - start_ms) / 1000 // bin_s))
            counts[min(index, bins - 1)] += 1
    return counts


def _waiting(o: MeasuredRequest, at_ms: int) -> bool:
    """Whether `o` was waiting at `at_ms`: enqueued and not yet dispatched (or dropped)."""
    left = o.dispatched_ms if o.dispatched_ms is not None else o.completed_ms
    return o.enqueued_ms <= at_ms <= left


def low_split_while_both_wait(
    submissions: Sequence[Submission], outcomes: Mapping[str, MeasuredRequest], tenant: str, other: str
) -> LowSplit:
    """Briefs completed OK of those dispatched while `tenant` and `other` both had one waiting."""
    briefs = {t: _briefs(of_tenant(submissions, t), outcomes) for t in (tenant, other)}
    counted = dict.fromkeys((tenant, other), 0)
    for mine, theirs in ((tenant, other), (other, tenant)):
        for o in briefs[mine]:
            if o.status != "OK" or o.dispatched_ms is None:
                continue
            at = o.dispatched_ms
            if any(_waiting(x, at) for x in briefs[theirs]):
                counted[mine] += 1
    total = counted[tenant] + counted[other]
    return LowSplit(tenant, counted, counted[tenant] / total if total else None)


def high_p95_target(alone: TierRow, with_flood: TierRow) -> Target:
    a, w = alone.wait_ms, with_flood.wait_ms
    name = "B's HIGH p95 wait with A present <= B alone + 10 ms"
    if a is None or w is None:
        return Target(name, "-", "-", MISS)
    limit = a.p95 + HIGH_P95_MARGIN_MS
    return Target(name, f"{w.p95:.1f} ms (alone {a.p95:.1f})", f"<= {limit:.1f} ms", verdict(w.p95 <= limit))


def share_target(split: LowSplit, weight_share: float) -> Target:
    name = "B's share of LOW completions while both have briefs waiting, within 10% of its weight share"
    low, high = weight_share * (1 - SHARE_TOLERANCE), weight_share * (1 + SHARE_TOLERANCE)
    threshold = f"{100 * low:.1f}-{100 * high:.1f}% (weight {100 * weight_share:.1f}%)"
    if split.share is None:
        return Target(name, "no brief started while both waited", threshold, MISS)
    measured = f"{100 * split.share:.1f}% ({split.counted[split.tenant]} of {split.total})"
    return Target(name, measured, threshold, verdict(low <= split.share <= high))


def lost_target(missing: Mapping[str, int]) -> Target:
    total = sum(missing.values())
    measured = ", ".join(f"{run} {n}" for run, n in missing.items())
    return Target("nothing accepted is lost (accepted without an outcome)", measured, "0", verdict(not total))


def backend_target(max_in_flight: Mapping[str, int], refused: Mapping[str, int], budget: int) -> Target:
    """The backend's own count of calls at once, and its 429s: a backend whose limit is the budget
    answers 429 to a call beyond it (and does not count it), so a 429 is a call above the budget too."""
    top = max(max_in_flight.values(), default=0)
    measured = ", ".join(f"{run} max {n}, 429s {refused.get(run, 0)}" for run, n in max_in_flight.items())
    ok = top <= budget and not any(refused.values())
    return Target(
        "backend concurrency never above the budget (its max, its 429s)",
        measured,
        f"<= {budget}, 0",
        verdict(ok),
    )


def _refused(x: tuple[str, TierRow, Mapping[str, int]]) -> str:
    kinds = x[2]
    return f"{x[1].refused}{f' ({outcomes(kinds)})' if kinds else ''}"


# Cells of (run, tier row, refusals by kind).
TIER_COLUMNS: list[Column] = [
    ("run", lambda x: x[0]),
    ("tier", lambda x: x[1].tier.value),
    ("sent", lambda x: x[1].submitted),
    ("accepted", lambda x: x[1].accepted),
    ("429/503 (why)", _refused),
    ("outcomes", lambda x: outcomes(x[1].by_status)),
    ("missing", lambda x: x[1].missing),
    ("wait mean ms", lambda x: figure("mean")(x[1].wait_ms)),
    ("wait p95 ms", lambda x: figure("p95")(x[1].wait_ms)),
    ("waits", lambda x: "-" if x[1].wait_ms is None else x[1].wait_ms.count),
]


def tier_table(
    rows: Mapping[str, Sequence[TierRow]], refused: Mapping[str, Mapping[Tier, Mapping[str, int]]]
) -> str:
    """One line per (run, tier): requests, ingest's refusals (by kind), outcomes, queue wait."""
    lines = [
        (run, row, refused.get(run, {}).get(row.tier, {})) for run, tiers in rows.items() for row in tiers
    ]
    return columns_table(TIER_COLUMNS, (x for x in lines if x[1].submitted))


def full_backend_table(rows: Mapping[str, FullBackendArrivals], budget: int) -> str:
    head = (
        f"run | B's chats dispatched | enqueued with all {budget} slots busy | their wait p50 / p95 ms "
        "| enqueue to the first call's end p50 / p95 ms"
    )

    def pair(s: Stats | None) -> str:
        return "-" if s is None else f"{s.p50:.1f} / {s.p95:.1f}"

    cells = [(n, r.dispatched, r.at_full, pair(r.wait_ms), pair(r.to_first_end_ms)) for n, r in rows.items()]
    return "\n".join(table(head, cells))


def series_table(series: Mapping[str, Sequence[int]], bin_s: float) -> str:
    """Columns of counts per time bin (`series`: column name -> counts)."""
    bins = max((len(v) for v in series.values()), default=0)

    def label(i: int) -> str:
        return f"{i * bin_s:g}-{(i + 1) * bin_s:g}" if i < bins - 1 else f"{i * bin_s:g}-end"

    rows = [(label(i), *(counts[i] for counts in series.values())) for i in range(bins)]
    return "\n".join(table(["s from start", *series], rows))


def target_table(targets: Sequence[Target]) -> str:
    return "\n".join(table(TARGET_HEAD, [(t.name, t.measured, t.threshold, t.verdict) for t in targets]))
