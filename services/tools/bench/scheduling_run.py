"""One run of the scheduling benchmark: one policy on the trace, against the real pipeline.

Every run gets a fresh topic prefix (no leftover backlog) and fresh processes (simulated backend with
limit B, results, one dispatcher, ingest), and replays the same arrival trace over HTTP ingest. Time
is compressed by S: the backend runs S times faster, arrivals come S times as often, and every
setting that is a duration (deadlines, typical and mean latencies, the LOW promotion age) is divided
by S. Queue waits are reported as measured (wall clock); the real-time equivalents (x S) are labelled.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from services.dispatcher.policies import build_scheduler
from services.dispatcher.settings import DispatcherSettings, build_schedule
from services.messaging.admin import create_topics
from services.messaging.kafka_config import KafkaSettings
from services.messaging.records import InferenceResult
from services.messaging.tiers import DEFAULT_DEADLINES_MS, DEFAULT_MEAN_LATENCY_S, Tier
from services.tools.bench.kafka import ResultCollector
from services.tools.bench.load import sample_health, submit_in_process, submit_trace
from services.tools.bench.summary import RunSummary, Submission, low_makespan, submit_stats, tier_rows
from services.tools.broker.broker import pick_free_ports
from services.tools.measures import Outcome, allowed_by, busy_intervals, utilization, waiting_intervals
from services.tools.stack.pipeline import Pipeline, PipelinePorts
from services.tools.traces.arrival import Arrival

# Real-time (S = 1) values the compression divides: the tiers' latencies and deadlines and the
# dispatcher's own defaults.
_DISPATCHER_DEFAULTS = DispatcherSettings.model_fields
REAL_PROMOTION_AGE_S = float(_DISPATCHER_DEFAULTS["promotion_age_s"].default)
REAL_RETRY_BACKOFF_S = (  # base, max
    float(_DISPATCHER_DEFAULTS["retry_base_backoff_s"].default),
    float(_DISPATCHER_DEFAULTS["retry_max_backoff_s"].default),
)
CHILD_START_LEAD_S = 3.0  # a spawned Python child takes about a second to import httpx on 2 cores
DUMP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RunSpec:
    name: str
    policy: str
    low_peak_ceiling: int | None = None


def run_specs(budget: int, headroom: int = 2) -> dict[str, RunSpec]:
    return {
        "inferq": RunSpec("inferq", "inferq"),
        # LOW may borrow everything but the HIGH headroom at peak.
        "inferq-lifted": RunSpec("inferq-lifted", "inferq", low_peak_ceiling=budget - headroom),
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
        # dispatcher (DispatcherSettings, INFERQ_)
        "INFERQ_POLICY": spec.policy,
        "INFERQ_SCHEDULE_PIN": "peak",
        "INFERQ_TYPICAL_LATENCY_S": _by_tier(latency),
        "INFERQ_PROMOTION_AGE_S": str(REAL_PROMOTION_AGE_S / compress),
        # Retry backoffs are durations of a request's life too: unscaled, a retried chat (0.5 s
        # deadline) would always expire during its 0.5 s backoff.
        "INFERQ_RETRY_BASE_BACKOFF_S": str(REAL_RETRY_BACKOFF_S[0] / compress),
        "INFERQ_RETRY_MAX_BACKOFF_S": str(REAL_RETRY_BACKOFF_S[1] / compress),
        # ingest (IngestSettings, INFERQ_INGEST_)
        "INFERQ_INGEST_DEADLINES_MS": json.dumps({t.value: v for t, v in deadlines.items()}),
        "INFERQ_INGEST_MEAN_LATENCY_S": _by_tier(latency),
        # Pipeline does not tell ingest which group's lag is the backlog; without this, admission
        # would weigh the lag of a group that never reads these topics (every record ever written).
        "INFERQ_INGEST_DISPATCHER_GROUP": f"{prefix}-dispatcher",
    }
    if spec.low_peak_ceiling is not None:
        env["INFERQ_LOW_PEAK_CEILING"] = str(spec.low_peak_ceiling)
    return env


@dataclass
class BenchConfig:
    compress: float
    budget: int
    timeout_s: float
    work_dir: Path
    log: Callable[[str], None] = print


async def _drive(
    pipeline: Pipeline, trace: list[Arrival], tag: str, collector: ResultCollector, timeout_s: float
) -> tuple[list[Submission], dict[str, InferenceResult], list[tuple[int, int]]]:
    samples: list[tuple[int, int]] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_health(pipeline.dispatcher_url(0), samples, stop))
    # The brief dump is sent by a process of its own, as a batch producer is: posting 300 requests
    # at once from this event loop would delay the chat arrivals due at the same moment (measured:
    # 0.7 s late, then sent as one artificial burst).
    dump = [a for a in trace if a.kind == "dump"]
    interactive = [a for a in trace if a.kind != "dump"]
    # Both processes start the trace at the same instant, late enough for the child to be up.
    start_wall_s = time.time() + CHILD_START_LEAD_S
    loop = asyncio.get_running_loop()
    try:
        # spawn, not fork: this process runs librdkafka threads (the result reader), unsafe to fork.
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            url = pipeline.ingest_url
            dumped = loop.run_in_executor(pool, submit_in_process, url, dump, tag, start_wall_s)
            sent = await submit_trace(url, interactive, tag, start_wall_s)
            from_child = await asyncio.wait_for(dumped, timeout=DUMP_TIMEOUT_S)
        submissions = sorted([*sent, *from_child], key=lambda s: s.index)
        accepted = {s.request_id for s in submissions if s.accepted}
        results = await asyncio.to_thread(collector.wait_for, accepted, timeout_s)
    finally:
        stop.set()
        await asyncio.wait({sampler}, timeout=5.0)
    return submissions, results, samples


def run_one(
    bootstrap: str, spec: RunSpec, trace: list[Arrival], config: BenchConfig
) -> tuple[RunSummary, dict[str, Any]]:
    """One policy on the trace, from fresh topics and processes to its summary and raw records."""
    tag = f"{spec.name}-{uuid.uuid4().hex[:8]}"
    prefix = f"bench.{tag}"
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix)
    create_topics(kafka)
    ports = PipelinePorts(*pick_free_ports(4))
    pipeline = Pipeline(
        bootstrap=bootstrap,
        work_dir=config.work_dir / tag,
        ports=ports,
        topic_prefix=prefix,
        budget=config.budget,
        backend_args=["--speed", f"{config.compress:g}"],
        extra_env=compressed_env(spec, config.compress, prefix),
    )
    collector = ResultCollector(bootstrap, kafka.topics.results, group_id=f"{prefix}-bench")
    started = time.monotonic()
    try:
        ready = pipeline.start(timeout_s=120.0)
        config.log(f"[{spec.name}] services ready: " + ", ".join(f"{n} {s:.1f} s" for n, s in ready.items()))
        httpx.post(f"{pipeline.backend_url}/admin/reset", timeout=5.0).raise_for_status()
        collector.start()
        submissions, results, samples = asyncio.run(_drive(pipeline, trace, tag, collector, config.timeout_s))
        backend = pipeline.backend_stats()
    finally:
        collector.stop()
        pipeline.stop()
    took = time.monotonic() - started
    outcomes = {rid: Outcome.from_result(r) for rid, r in results.items()}
    summary = summarize(spec, config, submissions, outcomes, backend, samples)
    config.log(
        f"[{spec.name}] done in {took:.0f} s: {len(outcomes)} outcomes, {len(summary.missing_ids)} missing"
    )
    raw = {
        "run": spec.name,
        "topic_prefix": prefix,
        "seconds": took,
        "env": compressed_env(spec, config.compress, prefix),
        "backend_stats": backend,
        "effective_budget_samples": samples,
        "duplicates_on_reply_topic": collector.duplicates,
        "submission_errors": [s.error for s in submissions if s.status is None][:20],
        # Every record, compact, so the tables can be recomputed or dug into without a rerun.
        "submissions_columns": [
            "index",
            "request_id",
            "kind",
            "tier",
            "due_ms",
            "sent_ms",
            "answered_ms",
            "status",
        ],
        "submissions": [
            [s.index, s.request_id, s.kind, s.tier.value, s.due_ms, s.sent_ms, s.answered_ms, s.status]
            for s in submissions
        ],
        "outcomes_columns": [
            "request_id",
            "tier",
            "status",
            "enqueued_ms",
            "dispatched_ms",
            "completed_ms",
            "attempts",
        ],
        "outcomes": [
            [o.request_id, o.tier.value, o.status, o.enqueued_ms, o.dispatched_ms, o.completed_ms, attempts]
            for o, attempts in ((outcomes[rid], r.attempts) for rid, r in results.items())
        ],
        "retried": sum(1 for r in results.values() if r.attempts > 1),
    }
    return summary, raw


def summarize(
    spec: RunSpec,
    config: BenchConfig,
    submissions: list[Submission],
    outcomes: dict[str, Outcome],
    backend: dict[str, Any],
    samples: list[tuple[int, int]],
) -> RunSummary:
    settings = DispatcherSettings(
        budget=config.budget, policy=spec.policy, schedule_pin="peak", low_peak_ceiling=spec.low_peak_ceiling
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
