"""`inferq bench fairness`: a steady tenant B alone, then with a tenant A flooding HIGH and LOW, on the
same trace through the real pipeline with a tenants file (keys and weights); tables and targets.

The trace is `infra/scenarios/bench/fairness.toml` with its rates set by the options (`scenarios`).

Both runs go through `pipeline_run` (fresh topics and processes: simulated backend with limit B,
results, one dispatcher, ingest, every service reading the same tenants file) with the scheduling
bench's compressed settings (peak pinned). A's requests are posted by a process of their own, as
another tenant's producer would be. Writes `<out>/fairness.json` (every number, every submission
and outcome, the machine) and `<out>/fairness.md`, and prints the markdown.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.bench.fairness_report import (
    LowSplit,
    arrivals_at_full_backend,
    backend_target,
    full_backend_table,
    high_p95_target,
    lost_target,
    low_completions_over_time,
    low_split_while_both_wait,
    of_tenant,
    refusals,
    series_table,
    share_target,
    target_table,
    tenant_rows,
    tier_table,
)
from inferq.tools.bench.kafka import bench_broker
from inferq.tools.bench.machine import header, publish, run_record, table
from inferq.tools.bench.pipeline_run import BenchConfig, PipelineRun, raw_records, run_pipeline
from inferq.tools.bench.scenarios import TENANT_A, TENANT_B, FairnessSpec, describe_fairness
from inferq.tools.bench.scheduling_run import RunSpec, compressed_env
from inferq.tools.bench.summary import TierRow, submit_stats
from inferq.tools.measures import MeasuredRequest
from inferq.tools.stack.tenants import TenantSpec, write_tenants
from inferq.tools.traces.generator import generate

ALONE, WITH_A = "b-alone", "b-with-a"
BIN_S = 5.0  # wall-clock seconds per bin of the LOW completions series


def default_timeout_s(spec: FairnessSpec, briefs: int) -> float:
    """Generous bound of the wait for every outcome: the trace, plus every brief at LOW's peak rate, x1.5."""
    low_s = briefs * DEFAULT_MEAN_LATENCY_S[Tier.LOW] / spec.compress / spec.peak_slots(Tier.LOW)
    return spec.duration_s + 1.5 * low_s + 60.0


def tenant_specs(spec: FairnessSpec) -> list[TenantSpec]:
    # max_tokens: the load generator's body sets it; any scenario; no rate limit, and no concurrency
    # cap unless asked for, so what holds A back is the fair share (and ingest's share of the backlog).
    params = {"max_tokens": True}
    cap = {} if spec.a_max_concurrency is None else {"max_concurrency": spec.a_max_concurrency}
    return [
        TenantSpec(TENANT_A, weight=spec.weight_a, params=params, extra=cap),
        TenantSpec(TENANT_B, weight=spec.weight_b, params=params),
    ]


def run(spec: FairnessSpec, *, out: Path, home: Path, timeout_s: float | None) -> int:
    started = time.monotonic()
    log = print
    trace = generate(spec.scenario())
    b_only = [a for a in trace if a.tenant == TENANT_B]
    briefs = sum(1 for a in trace if a.tier is Tier.LOW)
    log(
        f"trace: {len(trace)} requests ({len(b_only)} of B) over {spec.duration_s:g} s "
        f"(S = {spec.compress:g})"
    )
    tenants = tenant_specs(spec)
    tenants_dir = home / f"fairness-{uuid.uuid4().hex[:8]}"
    tenants_dir.mkdir(parents=True)
    tenants_file = write_tenants(tenants_dir / "tenants.toml", *tenants)  # key hashes only
    keys = {t.name: t.key for t in tenants}
    config = BenchConfig(
        compress=spec.compress,
        budget=spec.budget,
        timeout_s=timeout_s if timeout_s is not None else default_timeout_s(spec, briefs),
        work_dir=home,
        log=log,
    )

    def env(prefix: str) -> dict[str, str]:
        base = compressed_env(RunSpec("inferq", "inferq"), spec.compress, prefix)
        return base | {"INFERQ_TENANTS_FILE": str(tenants_file)}

    def flood(arrival: Any) -> bool:
        return bool(arrival.tenant == TENANT_A)

    runs: dict[str, PipelineRun] = {}
    with bench_broker(home, log) as bootstrap:
        for name, arrivals in ((ALONE, b_only), (WITH_A, trace)):
            runs[name] = run_pipeline(bootstrap, name, arrivals, config, env=env, in_child=flood, keys=keys)
    document, markdown = report(spec, trace, runs, seconds=time.monotonic() - started)
    publish(out, "fairness", document, markdown, indent=2, default=str)
    return 0 if all(not r.missing_ids for r in runs.values()) else 1


def report(
    spec: FairnessSpec, trace: list[Any], runs: dict[str, PipelineRun], *, seconds: float
) -> tuple[dict[str, Any], str]:
    outcomes = {
        name: {rid: MeasuredRequest.from_result(r) for rid, r in run.results.items()}
        for name, run in runs.items()
    }
    b_rows = {name: tenant_rows(run.submissions, outcomes[name], TENANT_B) for name, run in runs.items()}
    a_rows = {WITH_A: tenant_rows(runs[WITH_A].submissions, outcomes[WITH_A], TENANT_A)}
    b_refused = {name: refusals(run.submissions, TENANT_B) for name, run in runs.items()}
    a_refused = {WITH_A: refusals(runs[WITH_A].submissions, TENANT_A)}
    bins = math.ceil(spec.duration_s / BIN_S) + 1

    def series(name: str, tenant: str) -> list[int]:
        run = runs[name]
        start = min((s.due_ms for s in run.submissions), default=0)
        return low_completions_over_time(
            run.submissions, outcomes[name], tenant, start_ms=start, bin_s=BIN_S, bins=bins
        )

    low_series = {
        "B alone": series(ALONE, TENANT_B),
        "B with A": series(WITH_A, TENANT_B),
        "A": series(WITH_A, TENANT_A),
    }
    at_full = {
        name: arrivals_at_full_backend(run.submissions, outcomes[name], TENANT_B, Tier.HIGH, spec.budget)
        for name, run in runs.items()
    }
    split = low_split_while_both_wait(runs[WITH_A].submissions, outcomes[WITH_A], TENANT_B, TENANT_A)
    max_in_flight = {name: int(run.backend_stats["max_in_flight"]) for name, run in runs.items()}
    backend_429s = {name: _backend_429s(run) for name, run in runs.items()}
    targets = [
        high_p95_target(_tier(b_rows[ALONE], Tier.HIGH), _tier(b_rows[WITH_A], Tier.HIGH)),
        share_target(split, spec.weight_share(TENANT_B)),
        lost_target({name: len(run.missing_ids) for name, run in runs.items()}),
        backend_target(max_in_flight, backend_429s, spec.budget),
    ]
    document = {
        **run_record("fairness", seconds),
        "trace": describe_fairness(spec, trace),
        "tenants": [{"name": t, "weight_share": spec.weight_share(t)} for t in (TENANT_A, TENANT_B)],
        "b_rows": {name: [asdict(r) for r in rows] for name, rows in b_rows.items()},
        "a_rows": {name: [asdict(r) for r in rows] for name, rows in a_rows.items()},
        "refusals": {
            tenant: {run: {t.value: kinds for t, kinds in by_tier.items()} for run, by_tier in runs_.items()}
            for tenant, runs_ in ((TENANT_B, b_refused), (TENANT_A, a_refused))
        },
        "low_completions_bin_s": BIN_S,
        "low_completions": low_series,
        "low_split_while_both_wait": asdict(split),
        "b_high_at_full_backend": {name: asdict(r) for name, r in at_full.items()},
        "targets": [asdict(t) for t in targets],
        "run_details": [raw_records(run) for run in runs.values()],
    }
    tables = {
        "b": tier_table(b_rows, b_refused),
        "a": tier_table(a_rows, a_refused),
        "low": series_table(low_series, BIN_S),
        "runs": _run_table(runs, split),
        "full": full_backend_table(at_full, spec.budget),
        "targets": target_table(targets),
    }
    return document, render(document, spec, tables)


def abandoned_calls(run: PipelineRun) -> int:
    """Calls the backend finished with 200 that gave no OK outcome: the dispatcher gave up on them
    (a call bounded by its request's deadline) while the backend still ran them, holding a slot."""
    answered = int(dict(run.backend_stats.get("by_status") or {}).get("200", 0))
    return answered - sum(1 for r in run.results.values() if r.status.value == "OK")


def _backend_429s(run: PipelineRun) -> int:
    return int(dict(run.backend_stats.get("by_status") or {}).get("429", 0))


def _tier(rows: list[TierRow], tier: Tier) -> TierRow:
    return next(r for r in rows if r.tier is tier)


def _run_table(runs: dict[str, PipelineRun], split: LowSplit) -> str:
    lines = [
        *table(
            "run | seconds | backend max in flight | backend 429s | min effective budget "
            "| calls answered 200 whose request did not end OK | duplicates on reply topic "
            "| LOW starts while both waited (B / A) | B's 202 p50 / p95 ms"
        ),
    ]
    for name, run in runs.items():
        budget = min((b for _, b in run.effective_budget_samples), default=None)
        both = f"{split.counted[TENANT_B]} / {split.counted[TENANT_A]}" if name == WITH_A else "-"
        # How long ingest took to answer B: the machine's load shows here first.
        _, answer, _ = submit_stats(of_tenant(run.submissions, TENANT_B))
        cells = [
            name,
            f"{run.seconds:.0f}",
            str(run.backend_stats["max_in_flight"]),
            str(_backend_429s(run)),
            "-" if budget is None else str(budget),
            str(abandoned_calls(run)),
            str(run.duplicates_on_reply_topic),
            both,
            "-" if answer is None else f"{answer.p50:.1f} / {answer.p95:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(document: dict[str, Any], spec: FairnessSpec, tables: dict[str, str]) -> str:
    trace = document["trace"]
    rates = trace["rates_per_s"]
    counts = ", ".join(f"{k} {v}" for k, v in trace["counts"].items())
    b_share = 100 * spec.weight_share(TENANT_B)
    return "\n".join(
        [
            "# Fairness benchmark",
            "",
            header(document),
            "",
            f"Trace (seed {spec.seed}, {spec.duration_s:g} s of wall clock, time compressed S = "
            f"{spec.compress:g}, budget {spec.budget}, peak pinned): {trace['total']} requests: {counts}. "
            f"Weights A {spec.weight_a:g}, B {spec.weight_b:g} (B's share {b_share:.0f}%); A's "
            f"max_concurrency {spec.a_max_concurrency or 'none (the budget)'}. A floods "
            f"{spec.flood:g} x its share of each tier's peak floor: HIGH {rates['a_high']:.0f}/s (the floor "
            f"serves {rates['high_peak_floor_calls']:.0f}/s), LOW {rates['a_low']:.2f}/s (of "
            f"{rates['low_peak_floor_calls']:.2f}/s). B: chat and analysis "
            f"{rates['b_chat_and_analysis']:.1f}/s, briefs {rates['b_low']:.2f}/s. Run `{ALONE}` is the "
            "trace without A's requests.",
            "",
            "Waits are dispatched - enqueued in ms of the compressed run's wall clock; `429` is ingest's "
            "refusal (the tenant's share of the tier's backlog, or the tier full).",
            "",
            "## B, per tier",
            "",
            tables["b"],
            "",
            f"## B's LOW completions over time ({BIN_S:g} s bins from the trace's start)",
            "",
            tables["low"],
            "",
            "## A (with B)",
            "",
            tables["a"],
            "",
            "## Per run",
            "",
            tables["runs"],
            "",
            "## B's chats and a full backend",
            "",
            "A call is never interrupted: a chat that arrives while every slot is busy waits for the "
            "first call to end, whoever's it is and however fairly the next start is chosen.",
            "",
            tables["full"],
            "",
            "## Targets",
            "",
            tables["targets"],
            "",
        ]
    )
