"""One run of the scheduling benchmark: one policy on the trace, against the real pipeline
(`pipeline_run`: fresh topics and processes, the trace posted over HTTP ingest), and in the
simulator. Time is compressed by S: the backend runs S times faster, arrivals come S times as
often, and every setting that is a duration (deadlines, typical and mean latencies, the LOW
promotion age) is divided by S. Queue waits are reported as measured (wall clock); the real-time
equivalents (x S) are labelled.

The simulator's prediction (`predict`, pure): the same trace (its offsets, tiers and compressed
deadlines) through `inferq.tools.simulation.simulate` with the settings the run's dispatcher gets
(read back from `compressed_env`) and the compressed backend latencies. The simulator runs the
dispatcher's own scheduler and read-ahead with instant fetches and HTTP-free arrivals, so real -
simulated is what the pipeline itself adds: ingest's HTTP hop and produce, the Kafka hop, the
dispatcher's fetch, poll and batching.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from inferq.dispatcher.policies import build_scheduler
from inferq.dispatcher.settings import DispatcherSettings, build_schedule, preemptible_tiers
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, DEFAULT_MEAN_LATENCY_S, TIERS_BY_PRIORITY, Tier
from inferq.settings.table import settings_of
from inferq.tools.bench.pipeline_run import BenchConfig, raw_records, run_pipeline
from inferq.tools.bench.summary import (
    PreemptionFigures,
    RunSummary,
    Submission,
    low_makespan,
    outcome_figures,
    submit_stats,
    tier_rows,
)
from inferq.tools.measures import (
    MeasuredRequest,
    Stats,
    allowed_by,
    busy_intervals,
    makespan_s,
    utilization,
    waiting_intervals,
)
from inferq.tools.simulation.simulate import SimResult, sim_config, sim_scheduler, simulate
from inferq.tools.traces.arrival import Arrival

# Real-time (S = 1) values the compression divides: the tiers' latencies and deadlines and the
# dispatcher's own defaults.
_DISPATCHER_DEFAULTS = DispatcherSettings.model_fields
REAL_PROMOTION_AGE_S = float(_DISPATCHER_DEFAULTS["promotion_age_s"].default)
REAL_RETRY_BACKOFF_S = (  # base, max
    float(_DISPATCHER_DEFAULTS["retry_base_backoff_s"].default),
    float(_DISPATCHER_DEFAULTS["retry_max_backoff_s"].default),
)


@dataclass(frozen=True)
class RunSpec:
    name: str
    policy: str
    low_peak_ceiling: int | None = None
    forecast_lending: bool = False
    # What the simulated backend does with a call whose client hangs up (`inferq sim-backend
    # --on-hangup`): keep, as a hosted API; free, as a self-hosted server (preemption needs it).
    backend_on_hangup: str = "keep"
    # The backend declared preemptible (INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE): the dispatcher lends
    # every idle slot and takes a lent one back by cancelling its call (issue 22).
    preemptible: bool = False


def run_specs(budget: int, headroom: int = 2) -> dict[str, RunSpec]:
    return {
        "inferq": RunSpec("inferq", "inferq"),
        # LOW may borrow everything but the HIGH headroom at peak.
        "inferq-lifted": RunSpec("inferq-lifted", "inferq", low_peak_ceiling=budget - headroom),
        # The default schedule with forecast lending (issue 14): LOW borrows past its cap and into
        # the HIGH headroom while the chat forecast leaves room.
        "forecast": RunSpec("forecast", "inferq", forecast_lending=True),
        "static": RunSpec("static", "static"),
        "fifo": RunSpec("fifo", "fifo"),
        # The default schedule behind a self-hosted backend declared preemptible (issue 22).
        "preempt": RunSpec("preempt", "inferq", backend_on_hangup="free", preemptible=True),
        # The same declared against a hosted-API-like backend, which goes on counting a cancelled
        # call: what preemption costs where it must stay off.
        "preempt-hosted": RunSpec("preempt-hosted", "inferq", backend_on_hangup="keep", preemptible=True),
    }


def _by_tier(values: dict[Tier, float]) -> str:
    return json.dumps({t.value: v for t, v in values.items()})


def compressed_env(spec: RunSpec, compress: float, prefix: str) -> dict[str, str]:
    """Environment of every service of one run (names checked against the settings classes)."""
    latency = {t: round(s / compress, 6) for t, s in DEFAULT_MEAN_LATENCY_S.items()}
    deadlines = {t: max(1, round(ms / compress)) for t, ms in DEFAULT_DEADLINES_MS.items()}
    env = {
        # read by ingest's admission and the dispatcher alike (inferq.settings.shared)
        "INFERQ_TYPICAL_LATENCY_S": _by_tier(latency),
        # dispatcher (DispatcherSettings, INFERQ_DISPATCHER_)
        "INFERQ_DISPATCHER_POLICY": spec.policy,
        "INFERQ_DISPATCHER_SCHEDULE_PIN": "peak",
        "INFERQ_DISPATCHER_PROMOTION_AGE_S": str(REAL_PROMOTION_AGE_S / compress),
        # Retry backoffs are durations of a request's life too: unscaled, a retried chat (0.5 s
        # deadline) would always expire during its 0.5 s backoff.
        "INFERQ_DISPATCHER_RETRY_BASE_BACKOFF_S": str(REAL_RETRY_BACKOFF_S[0] / compress),
        "INFERQ_DISPATCHER_RETRY_MAX_BACKOFF_S": str(REAL_RETRY_BACKOFF_S[1] / compress),
        # ingest (IngestSettings, INFERQ_INGEST_)
        "INFERQ_INGEST_DEADLINES_MS": json.dumps({t.value: v for t, v in deadlines.items()}),
        # Pipeline does not tell ingest which group's lag is the backlog; without this, admission
        # would weigh the lag of a group that never reads these topics (every record ever written).
        "INFERQ_DISPATCHER_GROUP_ID": f"{prefix}-dispatcher",
    }
    if spec.low_peak_ceiling is not None:
        env["INFERQ_DISPATCHER_LOW_PEAK_CEILING"] = str(spec.low_peak_ceiling)
    # Said either way: the capped runs are the seed's ceilings whatever the dispatcher's default.
    env["INFERQ_DISPATCHER_FORECAST_LENDING"] = "true" if spec.forecast_lending else "false"
    env["INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE"] = "true" if spec.preemptible else "false"
    # simulated backend (SimBackendSettings, INFERQ_SIM_); said either way too
    env["INFERQ_SIM_ON_HANGUP"] = spec.backend_on_hangup
    return env


def run_one(
    bootstrap: str, spec: RunSpec, trace: list[Arrival], config: BenchConfig
) -> tuple[RunSummary, dict[str, Any]]:
    """One policy on the trace, from fresh topics and processes to its summary and raw records."""
    run = run_pipeline(
        bootstrap, spec.name, trace, config, env=lambda prefix: compressed_env(spec, config.compress, prefix)
    )
    outcomes = {rid: MeasuredRequest.from_result(r) for rid, r in run.results.items()}
    summary = summarize(
        spec, config, run.submissions, outcomes, run.backend_stats, run.effective_budget_samples
    )
    summary = replace(summary, preemption=preemption_figures(run.backend_stats, run.dispatcher_samples))
    return summary, raw_records(run)


def preemption_figures(backend: Mapping[str, Any], samples: Sequence[Mapping[str, Any]]) -> PreemptionFigures:
    """The dispatchers' preemption counters (samples of `dispatcher_samples`) and the backend's
    hang-up counts."""

    def total(name: str) -> int:
        return round(sum(float(x["value"]) for x in samples if x["name"] == name))

    by_tier: dict[str, int] = {}
    for x in samples:
        if x["name"] == "inferq_preemptions_total":
            tier = str(x["labels"].get("tier", "?"))
            by_tier[tier] = by_tier.get(tier, 0) + round(x["value"])
    return PreemptionFigures(
        by_tier=by_tier,
        limit_reached=total("inferq_preemption_limit_reached_total"),
        estimated_tokens=total("inferq_preempted_tokens_total"),
        abandoned_calls=int(backend.get("abandoned", 0)),
        abandoned_tokens=int(backend.get("abandoned_tokens", 0)),
        completed_tokens=int(backend.get("completed_tokens", 0)),
    )


def summarize(
    spec: RunSpec,
    config: BenchConfig,
    submissions: list[Submission],
    outcomes: dict[str, MeasuredRequest],
    backend: dict[str, Any],
    samples: list[tuple[int, int]],
) -> RunSummary:
    settings = DispatcherSettings(
        budget=config.budget,
        policy=spec.policy,
        schedule_pin="peak",
        low_peak_ceiling=spec.low_peak_ceiling,
        forecast_lending=spec.forecast_lending,
        backend_preemptible=spec.preemptible,
    )
    scheduler = build_scheduler(
        spec.policy, build_schedule(settings), preemptible=preemptible_tiers(settings)
    )
    promotion_ms = int(REAL_PROMOTION_AGE_S / config.compress * 1000)
    done = list(outcomes.values())
    lag, answer, dump_s = submit_stats(submissions)
    return RunSummary(
        run=spec.name,
        policy=spec.policy,
        compress=config.compress,
        budget=config.budget,
        tiers=tier_rows(submissions, outcomes),
        low_makespan_s=low_makespan(submissions, outcomes),
        backend_max_in_flight=int(backend["max_in_flight"]),
        backend_by_status={str(k): int(v) for k, v in dict(backend["by_status"]).items()},
        utilization=utilization(
            waiting_intervals(done, promotion_ms),
            busy_intervals(done, promotion_ms),
            allowed_by(scheduler),
            config.budget,
            samples,
        ),
        min_effective_budget=min((b for _, b in samples), default=config.budget),
        submit_lag_ms=lag,
        ingest_answer_ms=answer,
        dump_accepted_s=dump_s,
        missing_ids=sorted(s.request_id for s in submissions if s.accepted and s.request_id not in outcomes),
        ok_indexes=sorted(
            s.index for s in submissions if (o := outcomes.get(s.request_id)) is not None and o.status == "OK"
        ),
    )


# -- the simulator's prediction ---------------------------------------------------------------
# The schedule is pinned to peak, so the anchor does not pick the window; an evening-peak instant
# anyway, so that an unpinned run would still be simulated in the window the bench means.
ANCHOR_MS = int(datetime(2024, 1, 1, 20, tzinfo=UTC).timestamp() * 1000)
_DISPATCHER_PREFIX = "INFERQ_DISPATCHER_"


@dataclass(frozen=True)
class TierPrediction:
    tier: Tier
    arrivals: int
    by_status: dict[str, int]
    wait_ms: Stats | None  # dispatched - enqueued, over dispatched requests (as the real tier rows)
    end_to_end_ms: Stats | None  # completed - enqueued, over OK requests


@dataclass(frozen=True)
class Prediction:
    run: str
    policy: str
    low_peak_ceiling: int | None
    latency_s: dict[str, float]
    tiers: list[TierPrediction]
    low_makespan_s: float | None
    max_in_flight: int
    promoted: int

    def tier(self, tier: Tier) -> TierPrediction:
        return next(row for row in self.tiers if row.tier is tier)


def _decode(value: str) -> Any:
    # The env carries JSON for the per-tier maps and plain text for scalars; pydantic coerces the text.
    return json.loads(value) if value.startswith("{") else value


def run_settings(spec: RunSpec, compress: float, budget: int) -> tuple[DispatcherSettings, dict[Tier, int]]:
    """The dispatcher's settings and ingest's deadlines of one run, read from the very environment
    the run's services get (`compressed_env`), so the simulation cannot drift from the real run."""
    env = compressed_env(spec, compress, prefix="bench.prediction")
    # The dispatcher's own fields by the variable each reads (INFERQ_DISPATCHER_*, and the shared
    # names such as INFERQ_TYPICAL_LATENCY_S), from the settings table.
    fields = {s.name: s.path[0] for s in settings_of(DispatcherSettings) if len(s.path) == 1}
    overrides = {fields[name]: _decode(value) for name, value in env.items() if name in fields}
    unknown = sorted(n for n in env if n.startswith(_DISPATCHER_PREFIX) and n not in fields)
    if unknown:
        raise ValueError(f"compressed_env sets dispatcher settings that do not exist: {unknown}")
    settings = DispatcherSettings(budget=budget, **overrides)
    deadlines = {Tier(t): int(ms) for t, ms in json.loads(env["INFERQ_INGEST_DEADLINES_MS"]).items()}
    return settings, deadlines


def sim_request_id(arrival: Arrival) -> str:
    return f"trace-{arrival.index:05d}"


def sim_arrivals(
    trace: Sequence[Arrival], deadlines_ms: Mapping[Tier, int], start_ms: int = ANCHOR_MS
) -> list[Arrival]:
    """The bench trace anchored at `start_ms` for the simulator: enqueued at its offset, in its tier
    (the one ingest chooses, which `load.submit_trace` reports), expiring after that tier's
    (compressed) deadline as the run's ingest sets it."""
    return [
        replace(a, request_id=sim_request_id(a), start_ms=start_ms, deadline_ms=deadlines_ms[a.tier])
        for a in trace
    ]


def compressed_latency_s(compress: float) -> dict[Tier, float]:
    """The simulated backend's call time per source tier at `--speed compress` (it has no jitter)."""
    return {t: s / compress for t, s in DEFAULT_MEAN_LATENCY_S.items()}


def tier_predictions(result: SimResult) -> list[TierPrediction]:
    rows = []
    for tier in TIERS_BY_PRIORITY:
        done = [o for o in result.outcomes if o.tier is tier]
        by_status, wait_ms, end_to_end_ms = outcome_figures(done)
        rows.append(TierPrediction(tier, len(done), by_status, wait_ms, end_to_end_ms))
    return rows


def predict(spec: RunSpec, trace: Sequence[Arrival], *, compress: float, budget: int) -> Prediction:
    """Simulate one run spec on the trace (deterministic: the same inputs give the same prediction)."""
    settings, deadlines = run_settings(spec, compress, budget)
    arrivals = sim_arrivals(trace, deadlines)
    latency = compressed_latency_s(compress)
    result = simulate(
        arrivals, sim_scheduler(settings.policy, build_schedule(settings)), latency, sim_config(settings)
    )
    dump = {sim_request_id(a) for a in trace if a.kind == "dump"}
    dump_start = min((o.enqueued_ms for o in result.outcomes if o.request_id in dump), default=None)
    low_done = [o.completed_ms for o in result.outcomes if o.tier is Tier.LOW]
    return Prediction(
        run=spec.name,
        policy=settings.policy,
        low_peak_ceiling=settings.low_peak_ceiling,
        latency_s={t.value: s for t, s in latency.items()},
        tiers=tier_predictions(result),
        low_makespan_s=makespan_s(dump_start, low_done),
        max_in_flight=result.max_in_flight,
        promoted=result.promoted,
    )
