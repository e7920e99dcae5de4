"""The scheduling targets (BENCHMARKS.md) checked against the runs and against the simulator's
prediction of each, and the markdown tables (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from inferq.messaging.tiers import Tier
from inferq.tools.bench.machine import NA, cell, table, verdict
from inferq.tools.bench.scheduling_run import Prediction
from inferq.tools.bench.summary import RunSummary
from inferq.tools.measures import Stats

TOLERANCE_MS = 30.0  # real - simulated mean wait allowed of HIGH and MEDIUM
TARGET_TIERS = (Tier.HIGH, Tier.MEDIUM)


@dataclass(frozen=True)
class Target:
    name: str
    run: str
    measured: str
    threshold: str
    verdict: str


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def evaluate(runs: Mapping[str, RunSummary]) -> list[Target]:
    """One row per target; a target whose runs were not part of this invocation is n/a."""
    targets: list[Target] = []

    def add(name: str, run: str, needs: tuple[str, ...], check: Callable[[], tuple[str, str, bool]]) -> None:
        if not all(r in runs for r in needs):
            targets.append(Target(name, run, "-", "-", NA))
            return
        measured, threshold, ok = check()
        targets.append(Target(name, run, measured, threshold, verdict(ok)))

    def high_wait(field: str, limit_ms: float) -> tuple[str, str, bool]:
        wait = runs["inferq"].tier(Tier.HIGH).wait_ms
        value = None if wait is None else float(getattr(wait, field))
        return f"{cell(value)} ms", f"<= {limit_ms:.0f} ms", value is not None and value <= limit_ms

    def medium_vs_fifo(field: str) -> tuple[str, str, bool]:
        ours = getattr(runs["inferq"].tier(Tier.MEDIUM), field)
        fifo = getattr(runs["fifo"].tier(Tier.MEDIUM), field)
        if ours is None or fifo is None:
            return "-", "<= 1/4 of FIFO", False
        limit = fifo.mean / 4
        return f"{ours.mean:.1f} ms", f"<= {limit:.1f} ms (FIFO {fifo.mean:.1f} / 4)", ours.mean <= limit

    def utilization(run: str) -> tuple[str, str, bool]:
        value = runs[run].utilization.vs_allowed_waiting
        return _pct(value), ">= 95%", value is not None and value >= 0.95

    def makespan() -> tuple[str, str, bool]:
        lifted, fifo = runs["inferq-lifted"].low_makespan_s, runs["fifo"].low_makespan_s
        if lifted is None or fifo is None:
            return cell(lifted), "LOW unfinished", False
        return f"{lifted:.1f} s", f"<= {1.6 * fifo:.1f} s (1.6 x FIFO {fifo:.1f})", lifted <= 1.6 * fifo

    def forecast_makespan() -> tuple[str, str, bool]:
        ours, fifo = runs["forecast"].low_makespan_s, runs["fifo"].low_makespan_s
        if ours is None or fifo is None:
            return cell(ours), "LOW unfinished", False
        return f"{ours:.1f} s", f"<= {1.5 * fifo:.1f} s (1.5 x FIFO {fifo:.1f})", ours <= 1.5 * fifo

    def forecast_high_p99() -> tuple[str, str, bool]:
        ours, capped = runs["forecast"].tier(Tier.HIGH).wait_ms, runs["inferq"].tier(Tier.HIGH).wait_ms
        if ours is None or capped is None:
            return "-", "<= 2 x inferq's", False
        limit = 2 * capped.p99
        return f"{ours.p99:.1f} ms", f"<= {limit:.1f} ms (2 x inferq {capped.p99:.1f})", ours.p99 <= limit

    def forecast_high_expired() -> tuple[str, str, bool]:
        expired = runs["forecast"].tier(Tier.HIGH).by_status.get("EXPIRED", 0)
        return f"{expired} HIGH expired", "0", expired == 0

    def forecast_budget() -> tuple[str, str, bool]:
        value = runs["forecast"].utilization.vs_budget_waiting
        return _pct(value), ">= 90%", value is not None and value >= 0.9

    def backend(run: str) -> tuple[str, str, bool]:
        s = runs[run]
        ok = s.backend_max_in_flight <= s.budget and s.backend_429 == 0
        return f"max {s.backend_max_in_flight}, 429s {s.backend_429}", f"<= {s.budget}, 0", ok

    def starvation(run: str) -> tuple[str, str, bool]:
        starved = runs[run].starved()
        return ", ".join(starved) or "none starved", "none", not starved

    add(
        "HIGH mean queue wait (wall clock, compressed run)",
        "inferq",
        ("inferq",),
        partial(high_wait, "mean", 30),
    )
    add(
        "HIGH p95 queue wait (wall clock, compressed run)",
        "inferq",
        ("inferq",),
        partial(high_wait, "p95", 100),
    )
    both = ("inferq", "fifo")
    add(
        "MEDIUM mean queue wait vs FIFO (dispatched only)", "inferq", both, partial(medium_vs_fifo, "wait_ms")
    )
    add(
        "MEDIUM mean queue wait vs FIFO (expired counted until dropped)",
        "inferq",
        both,
        partial(medium_vs_fifo, "wait_incl_dropped_ms"),
    )
    for run in ("inferq", "inferq-lifted"):
        add(
            "utilization while work waits, of what the ceilings allow", run, (run,), partial(utilization, run)
        )
    add("LOW makespan, LOW's peak cap lifted, vs FIFO", "inferq-lifted", ("inferq-lifted", "fifo"), makespan)
    with_fifo = ("forecast", "fifo")
    add("LOW makespan, forecast lending, vs FIFO", "forecast", with_fifo, forecast_makespan)
    add("HIGH p99 queue wait vs the capped run's", "forecast", ("forecast", "inferq"), forecast_high_p99)
    add("no HIGH expired, forecast lending", "forecast", ("forecast",), forecast_high_expired)
    add("budget used while work waits, forecast lending", "forecast", ("forecast",), forecast_budget)
    for run in runs:
        add("backend max concurrency <= B, zero 429s", run, (run,), partial(backend, run))
    for run in ("inferq", "inferq-lifted", "forecast"):
        add("no tier starved (all accepted ended, OKs in each tier)", run, (run,), partial(starvation, run))
    return targets


def _stats_cells(s: Stats | None) -> list[str]:
    if s is None:
        return ["-"] * 4
    return [cell(s.mean), cell(s.p50), cell(s.p95), cell(s.p99)]


def _real(s: Stats | None, compress: float) -> str:
    """Mean / p95 multiplied by S, in seconds: the real-evening equivalent of a compressed figure."""
    return "-" if s is None else f"{s.mean * compress / 1000:.2f} / {s.p95 * compress / 1000:.2f}"


def tier_table(runs: Mapping[str, RunSummary]) -> str:
    head = (
        "run | tier | submitted | accepted | refused 429/503 | outcomes | missing "
        "| wait mean | p50 | p95 | p99 | wait mean incl. expired | e2e mean | p50 | p95 | p99 "
        "| real-time eq. wait mean / p95 (s) | real-time eq. e2e mean / p95 (s)"
    )
    rows: list[list[str]] = []
    for name, run in runs.items():
        for row in run.tiers:
            outcomes = ", ".join(f"{k} {v}" for k, v in row.by_status.items()) or "-"
            cells = [
                name,
                row.tier.value,
                str(row.submitted),
                str(row.accepted),
                str(row.refused),
                outcomes,
                str(row.missing),
                *_stats_cells(row.wait_ms),
                cell(row.wait_incl_dropped_ms.mean if row.wait_incl_dropped_ms else None),
                *_stats_cells(row.end_to_end_ms),
                _real(row.wait_ms, run.compress),
                _real(row.end_to_end_ms, run.compress),
            ]
            rows.append(cells)
    return "\n".join(table(head, rows))


def run_table(runs: Mapping[str, RunSummary]) -> str:
    head = (
        "run | policy | LOW makespan s (real-time eq. min) | backend max in flight | backend 429s "
        "| util. of allowed, while waiting | util. of B, while waiting | util. of B, whole run "
        "| waiting time s | min effective budget | starved | chat+analysis: client lag p95 ms "
        "| chat+analysis: ingest 202 p50 / p95 ms | brief dump accepted in s"
    )
    rows: list[list[str]] = []
    for name, run in runs.items():
        u = run.utilization
        span = run.low_makespan_s
        makespan = "-" if span is None else f"{span:.1f} ({span * run.compress / 60:.1f})"
        ingest = run.ingest_answer_ms
        cells = [
            name,
            run.policy,
            makespan,
            str(run.backend_max_in_flight),
            str(run.backend_429),
            _pct(u.vs_allowed_waiting),
            _pct(u.vs_budget_waiting),
            _pct(u.vs_budget_span),
            cell(u.waiting_s),
            str(run.min_effective_budget),
            ", ".join(run.starved()) or "none",
            cell(run.submit_lag_ms.p95 if run.submit_lag_ms else None),
            "-" if ingest is None else f"{ingest.p50:.1f} / {ingest.p95:.1f}",
            cell(run.dump_accepted_s),
        ]
        rows.append(cells)
    return "\n".join(table(head, rows))


def target_table(targets: list[Target]) -> str:
    rows = [(t.name, t.run, t.measured, t.threshold, t.verdict) for t in targets]
    return "\n".join(table(("target", "run", "measured", "threshold", "verdict"), rows))


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
        targets.append(Target(name, run, measured, threshold, verdict(ok)))
    return targets
