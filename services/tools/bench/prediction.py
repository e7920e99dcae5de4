"""The simulator's prediction beside each real run of the scheduling benchmark.

For every run spec, the same seeded trace (its offsets, tiers and compressed deadlines) goes through
`inferq.tools.simulation.simulate` with the settings the run's dispatcher gets (`compressed_env`: policy,
pinned schedule, LOW ceiling, compressed typical latencies and promotion age) and the compressed
backend latencies. The simulator runs the dispatcher's own scheduler and read-ahead with instant
fetches and HTTP-free arrivals, so real - simulated is what the pipeline itself adds: the ingest
HTTP hop and produce, the Kafka hop, the dispatcher's fetch, poll and batching.

Everything here is pure: no broker, no clock.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from inferq.dispatcher.settings import DispatcherSettings, build_schedule
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, TIERS_BY_PRIORITY, Tier
from inferq.settings.table import settings_of
from inferq.tools.bench.machine import cell, table
from inferq.tools.bench.scheduling_report import MISS, NA, PASS, Target
from inferq.tools.bench.scheduling_run import RunSpec, compressed_env
from inferq.tools.bench.summary import RunSummary
from inferq.tools.measures import Stats, makespan_s, stats
from inferq.tools.simulation.simulate import SimResult, sim_config, sim_scheduler, simulate
from inferq.tools.traces.arrival import Arrival

# The schedule is pinned to peak, so the anchor does not pick the window; an evening-peak instant
# anyway, so that an unpinned run would still be simulated in the window the bench means.
ANCHOR_MS = int(datetime(2024, 1, 1, 20, tzinfo=UTC).timestamp() * 1000)
TOLERANCE_MS = 30.0
TARGET_TIERS = (Tier.HIGH, Tier.MEDIUM)
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
        waits = [float(o.dispatched_ms - o.enqueued_ms) for o in done if o.dispatched_ms is not None]
        e2e = [float(o.completed_ms - o.enqueued_ms) for o in done if o.status == "OK"]
        rows.append(
            TierPrediction(
                tier=tier,
                arrivals=len(done),
                by_status=dict(sorted(Counter(o.status for o in done).items())),
                wait_ms=stats(waits),
                end_to_end_ms=stats(e2e),
            )
        )
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


# -- comparison with the real runs ------------------------------------------------------------
def _field(s: Stats | None, name: str) -> float | None:
    return None if s is None else float(getattr(s, name))


def wait_gap_ms(real: RunSummary, predicted: Prediction, tier: Tier) -> float | None:
    """Real - simulated mean queue wait of `tier` (dispatched requests), in ms."""
    ours, sim = real.tier(tier).wait_ms, predicted.tier(tier).wait_ms
    return None if ours is None or sim is None else ours.mean - sim.mean


def _outcomes(by_status: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in by_status.items()) or "-"


def comparison_table(runs: Mapping[str, RunSummary], predictions: Mapping[str, Prediction]) -> str:
    head = (
        "run | tier | outcomes real | outcomes sim | wait mean real | sim | real - sim "
        "| wait p95 real | sim | e2e mean real | sim | e2e p95 real | sim"
    )
    rows: list[list[str]] = []
    for name, run in runs.items():
        predicted = predictions.get(name)
        if predicted is None:
            continue
        for row in run.tiers:
            sim = predicted.tier(row.tier)
            cells = [
                name,
                row.tier.value,
                _outcomes(row.by_status),
                _outcomes(sim.by_status),
                cell(_field(row.wait_ms, "mean")),
                cell(_field(sim.wait_ms, "mean")),
                cell(wait_gap_ms(run, predicted, row.tier), "+.1f"),
                cell(_field(row.wait_ms, "p95")),
                cell(_field(sim.wait_ms, "p95")),
                cell(_field(row.end_to_end_ms, "mean")),
                cell(_field(sim.end_to_end_ms, "mean")),
                cell(_field(row.end_to_end_ms, "p95")),
                cell(_field(sim.end_to_end_ms, "p95")),
            ]
            rows.append(cells)
    return "\n".join(table(head, rows))


def makespan_table(runs: Mapping[str, RunSummary], predictions: Mapping[str, Prediction]) -> str:
    rows: list[list[str]] = []
    for name, run in runs.items():
        predicted = predictions.get(name)
        if predicted is not None:
            cells = [
                name,
                cell(run.low_makespan_s),
                cell(predicted.low_makespan_s),
                str(run.backend_max_in_flight),
                str(predicted.max_in_flight),
            ]
            rows.append(cells)
    return "\n".join(table("run | LOW makespan s real | sim | max in flight real (backend) | sim", rows))


def prediction_targets(runs: Mapping[str, RunSummary], predictions: Mapping[str, Prediction]) -> list[Target]:
    """Per run: HIGH and MEDIUM mean waits of the real pipeline within 30 ms of the simulator's."""
    name = f"real HIGH and MEDIUM mean waits within {TOLERANCE_MS:.0f} ms of the simulator's, same trace"
    targets = []
    for run, summary in runs.items():
        predicted = predictions.get(run)
        gaps = {t: None if predicted is None else wait_gap_ms(summary, predicted, t) for t in TARGET_TIERS}
        if predicted is None or any(g is None for g in gaps.values()):
            targets.append(Target(name, run, "-", "-", NA))
            continue
        measured = ", ".join(f"{t.value} {cell(g, '+.1f')} ms" for t, g in gaps.items())
        ok = all(g is not None and abs(g) <= TOLERANCE_MS for g in gaps.values())
        threshold = f"abs(real - sim) <= {TOLERANCE_MS:.0f} ms each"
        targets.append(Target(name, run, measured, threshold, PASS if ok else MISS))
    return targets
