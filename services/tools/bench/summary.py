"""Per-run numbers from what the bench recorded: submissions, outcomes, backend stats (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inferq.messaging.tiers import TIERS_BY_PRIORITY, Tier
from inferq.tools.measures import MeasuredRequest, Stats, Utilization, makespan_s, stats

ACCEPTED = 202
REFUSED = (429, 503)  # a refusal by ingest is an outcome of the run, not an error of the bench


@dataclass(frozen=True)
class Submission:
    """One POST to ingest: when it was due, sent and answered (epoch ms), and the answer."""

    index: int
    request_id: str
    scenario: str
    kind: str
    tier: Tier
    due_ms: int
    sent_ms: int
    answered_ms: int
    status: int | None  # None: no HTTP answer (a transport error)
    error: str | None = None
    tenant: str = ""  # the tenant it was sent for (the arrival's)

    @property
    def accepted(self) -> bool:
        return self.status == ACCEPTED


@dataclass(frozen=True)
class TierRow:
    tier: Tier
    submitted: int
    accepted: int
    refused: int
    errors: int
    by_status: dict[str, int]
    missing: int
    wait_ms: Stats | None  # dispatched - enqueued, over dispatched requests
    # As wait_ms, plus requests dropped undispatched (EXPIRED) with their time in queue until the drop:
    # a lower bound of what they would have waited, so a policy is not flattered by what it let expire.
    wait_incl_dropped_ms: Stats | None
    end_to_end_ms: Stats | None


@dataclass(frozen=True)
class PreemptionFigures:
    """What preemption did in one run and what it cost: the dispatcher's counters (`/metrics`) and
    the simulated backend's (`/stats`), which counts every call whose client hung up."""

    by_tier: dict[str, int] = field(default_factory=dict)  # inferq_preemptions_total
    limit_reached: int = 0  # inferq_preemption_limit_reached_total
    estimated_tokens: int = 0  # inferq_preempted_tokens_total: the dispatcher's own count
    abandoned_calls: int = 0  # the backend's calls whose client hung up
    abandoned_tokens: int = 0  # tokens those had generated: discarded
    completed_tokens: int = 0  # completion tokens of the calls generated to their end: served

    @property
    def total(self) -> int:
        return sum(self.by_tier.values())

    @property
    def discarded_share(self) -> float | None:
        """Discarded tokens over tokens served, as the backend counted them."""
        return None if self.completed_tokens <= 0 else self.abandoned_tokens / self.completed_tokens


@dataclass(frozen=True)
class RunSummary:
    run: str
    policy: str
    compress: float
    budget: int
    tiers: list[TierRow]
    low_makespan_s: float | None
    backend_max_in_flight: int
    backend_by_status: dict[str, int]
    utilization: Utilization
    min_effective_budget: int
    # Of the interactive arrivals (chat, analysis): answered - due, how far the client fell behind the
    # trace; answered - sent, ingest's 202 latency.
    submit_lag_ms: Stats | None
    ingest_answer_ms: Stats | None
    dump_accepted_s: float | None  # first brief sent to last brief answered
    missing_ids: list[str] = field(default_factory=list)
    preemption: PreemptionFigures = field(default_factory=PreemptionFigures)
    # The trace indexes of the requests answered OK: which requests a run served that another did not.
    ok_indexes: list[int] = field(default_factory=list)

    @property
    def backend_429(self) -> int:
        return self.backend_by_status.get("429", 0)

    def tier(self, tier: Tier) -> TierRow:
        return next(row for row in self.tiers if row.tier is tier)

    def starved(self) -> list[Tier]:
        """Tiers with accepted work that did not all end, or of which nothing succeeded."""
        return [
            row.tier
            for row in self.tiers
            if row.accepted > 0 and (row.missing > 0 or row.by_status.get("OK", 0) == 0)
        ]


def outcome_figures(done: Sequence[MeasuredRequest]) -> tuple[dict[str, int], Stats | None, Stats | None]:
    """Outcomes by status; queue wait (dispatched - enqueued) of the dispatched ones and end to end
    (completed - enqueued) of the OK ones, in ms. For a real run's tier and for the simulator's."""
    waits = [float(o.dispatched_ms - o.enqueued_ms) for o in done if o.dispatched_ms is not None]
    e2e = [float(o.completed_ms - o.enqueued_ms) for o in done if o.status == "OK"]
    return dict(sorted(Counter(o.status for o in done).items())), stats(waits), stats(e2e)


def tier_rows(submissions: Sequence[Submission], outcomes: Mapping[str, MeasuredRequest]) -> list[TierRow]:
    """One row per tier; requests are attributed to the tier ingest chose (their topic)."""
    rows = []
    for tier in TIERS_BY_PRIORITY:
        subs = [s for s in submissions if s.tier is tier]
        accepted = [s for s in subs if s.accepted]
        done = [outcomes[s.request_id] for s in accepted if s.request_id in outcomes]
        by_status, wait_ms, end_to_end_ms = outcome_figures(done)
        waits_and_drops = [
            float(o.completed_ms if o.dispatched_ms is None else o.dispatched_ms) - o.enqueued_ms
            for o in done
        ]
        rows.append(
            TierRow(
                tier=tier,
                submitted=len(subs),
                accepted=len(accepted),
                refused=sum(1 for s in subs if s.status in REFUSED),
                errors=sum(1 for s in subs if not s.accepted and s.status not in REFUSED),
                by_status=by_status,
                missing=len(accepted) - len(done),
                wait_ms=wait_ms,
                wait_incl_dropped_ms=stats(waits_and_drops),
                end_to_end_ms=end_to_end_ms,
            )
        )
    return rows


def low_makespan(submissions: Sequence[Submission], outcomes: Mapping[str, MeasuredRequest]) -> float | None:
    """From the dump's first enqueue to the last LOW outcome, in seconds (None if LOW is unfinished)."""
    dump = [outcomes[s.request_id] for s in submissions if s.kind == "dump" and s.request_id in outcomes]
    low = [o for o in outcomes.values() if o.tier is Tier.LOW]
    accepted_low = sum(1 for s in submissions if s.tier is Tier.LOW and s.accepted)
    if len(low) < accepted_low:
        return None
    return makespan_s(min((o.enqueued_ms for o in dump), default=None), [o.completed_ms for o in low])


def submit_stats(submissions: Sequence[Submission]) -> tuple[Stats | None, Stats | None, float | None]:
    """(client lag, ingest answer time) of the interactive arrivals, and how long the dump took to get in."""
    answered = [s for s in submissions if s.status is not None and s.kind != "dump"]
    lag = stats([float(s.answered_ms - s.due_ms) for s in answered])
    latency = stats([float(s.answered_ms - s.sent_ms) for s in answered])
    dump = [s for s in submissions if s.kind == "dump"]
    took = (max(s.answered_ms for s in dump) - min(s.sent_ms for s in dump)) / 1000 if dump else None
    return lag, latency, took
