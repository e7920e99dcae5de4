"""One run of the scheduling benchmark: one policy on the trace, against the real pipeline
(`pipeline_run`: fresh topics and processes, the trace posted over HTTP ingest). Time is compressed
by S: the backend runs S times faster, arrivals come S times as often, and every setting that is a
duration (deadlines, typical and mean latencies, the LOW promotion age) is divided by S. Queue waits
are reported as measured (wall clock); the real-time equivalents (x S) are labelled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from inferq.dispatcher.policies import build_scheduler
from inferq.dispatcher.settings import DispatcherSettings, build_schedule
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.bench.pipeline_run import BenchConfig, raw_records, run_pipeline
from inferq.tools.bench.summary import RunSummary, Submission, low_makespan, submit_stats, tier_rows
from inferq.tools.measures import MeasuredRequest, allowed_by, busy_intervals, utilization, waiting_intervals
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
    return summary, raw_records(run)


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
    )
    scheduler = build_scheduler(spec.policy, build_schedule(settings))
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
    )
