"""`inferq simulate`: builds the dispatcher's schedule and scheduler from its own settings, runs the
simulation on a trace, prints the table and writes the document."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import ValidationError

from inferq.dispatcher.schedule import ScheduleError
from inferq.dispatcher.settings import DispatcherSettings, build_schedule, preemptible_tiers
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S
from inferq.tools.report.documents import RunDocument, write_documents
from inferq.tools.report.errors import ReportError
from inferq.tools.report.preemption import TierPreemption, render_preemption
from inferq.tools.report.stats import request_counts
from inferq.tools.report.table import render
from inferq.tools.simulation.backend_latency import mean_inference_s, parse_latency, recorded_outcomes
from inferq.tools.simulation.simulate import (
    PreemptionCost,
    SimConfig,
    sim_config,
    sim_scheduler,
    simulate,
)
from inferq.tools.traces.errors import TraceError
from inferq.tools.traces.files import load_trace


def dispatcher_settings(args: argparse.Namespace) -> DispatcherSettings:
    """The dispatcher's settings with the command line's overrides: what is not given comes from
    the environment exactly as the dispatcher reads it."""
    overrides: dict[str, Any] = {
        "policy": args.policy,
        "budget": args.budget,
        "schedule_file": args.schedule,
        "schedule_pin": args.pin,
        "low_peak_ceiling": args.low_peak_ceiling,
        "timezone": args.timezone,
        "promotion_age_s": args.promotion_age,
        "early_drop": False if args.no_early_drop else None,
        "readahead_per_tier": args.readahead,
        "forecast_lending": args.forecast_lending,
        "backend_preemptible": args.preemptible,
        "max_preemptions": args.max_preemptions,
    }
    return DispatcherSettings(**{k: v for k, v in overrides.items() if v is not None})


def start_ms(text: str | None, timezone: str) -> int:
    """Epoch ms of `offset_ms` 0: `text` (ISO; naive means the schedule's timezone) or the peak's start."""
    zone = ZoneInfo(timezone)
    start = datetime.fromisoformat(text) if text else datetime(2024, 1, 1, 20, 0, tzinfo=zone)
    if start.tzinfo is None:
        start = start.replace(tzinfo=zone)
    return round(start.timestamp() * 1000)


def default_name(settings: DispatcherSettings, args: argparse.Namespace) -> str:
    parts = [f"sim {settings.policy}"]
    if settings.forecast_lending:
        parts.append("forecast lending")
    if preemptible_tiers(settings) and settings.policy == "inferq":
        parts.append("preemption")
    if settings.low_peak_ceiling is not None:
        parts.append(f"LOW peak ceiling {settings.low_peak_ceiling}")
    if args.trace:
        parts.append(Path(args.trace).stem)
    return ", ".join(parts)


def preempting(config: SimConfig, policy: str) -> bool:
    """Whether the simulation preempted (the tiered policy only, as the dispatcher)."""
    return bool(config.preemptible) and policy == "inferq"


def by_tier(cost: PreemptionCost) -> dict[str, TierPreemption]:
    return {
        t.value: TierPreemption(cost.preemptions[t], cost.discarded_tokens[t], cost.limit_reached[t])
        for t in cost.preemptions
    }


def preemption_params(config: SimConfig, policy: str, cost: PreemptionCost) -> dict[str, Any]:
    """The document's preemption figures: per tier as `inferq report` reads a run's
    (``report/preemption.py``: preempted, tokens discarded, limit reached), and the call time and
    estimated tokens discarded beside those served. Nothing when the simulation did not preempt."""
    if not preempting(config, policy):
        return {}
    return {
        "preemption": {tier: row.as_list() for tier, row in by_tier(cost).items()},
        "preemption_cost": {
            "discarded_call_ms": cost.discarded_call_ms,
            "served_call_ms": cost.served_call_ms,
            "discarded_tokens_estimated": sum(cost.discarded_tokens.values()),
            "served_tokens_estimated": cost.served_tokens,
        },
    }


def discarded_line(cost: PreemptionCost) -> str:
    discarded = sum(cost.discarded_tokens.values())

    def share(part: int, whole: int) -> str:
        return f"{part / whole:.1%}" if whole else "-"

    return (
        f"discarded: {cost.discarded_call_ms / 1000:,.1f} s of backend calls "
        f"({share(cost.discarded_call_ms, cost.served_call_ms)} of the {cost.served_call_ms / 1000:,.1f} s "
        f"served), ~{discarded:,} tokens ({share(discarded, cost.served_tokens)} of ~{cost.served_tokens:,} "
        "served; estimated as the dispatcher does: elapsed share of the typical call x the request's "
        "token estimate)"
    )


def run_simulate(args: argparse.Namespace) -> int:
    try:
        settings = dispatcher_settings(args)
        schedule = build_schedule(settings)
        base = dict(DEFAULT_MEAN_LATENCY_S)
        if args.latency_from is not None:
            base.update(mean_inference_s(recorded_outcomes(args.latency_from)))
        latency = parse_latency(args.latency, base)
        trace = load_trace(args.trace, start_ms=start_ms(args.start, schedule.timezone))
        config = sim_config(settings, jitter=args.jitter, seed=args.seed)
    except (ReportError, TraceError, ScheduleError, ValidationError, ValueError) as exc:
        print(f"error: {exc}")
        return 2
    started = time.perf_counter()
    result = simulate(trace.arrivals, sim_scheduler(settings.policy, schedule), latency, config)
    took_s = time.perf_counter() - started
    doc = RunDocument(
        kind="simulation",
        name=args.name or default_name(settings, args),
        budget=settings.budget,
        outcomes=result.outcomes,
        requests=request_counts(trace, result.outcomes),
        params={
            "trace": str(args.trace),
            "policy": settings.policy,
            "schedule": str(settings.schedule_file) if settings.schedule_file else "built-in",
            "pin": settings.schedule_pin,
            "low_peak_ceiling": settings.low_peak_ceiling,
            "latency_s": {t.value: s for t, s in latency.items()},
            "config": {
                k: sorted(t.value for t in v) if k == "preemptible" else v
                for k, v in vars(config).items()
                if k not in ("early_drop_ms", "typical_ms")
            },
            "typical_ms": {t.value: ms for t, ms in config.typical_ms.items()},
            "early_drop_ms": {t.value: ms for t, ms in config.early_drop_ms.items()},
            "promoted": result.promoted,
            "simulation_s": round(took_s, 3),
            **preemption_params(config, settings.policy, result.preemption),
        },
    )
    print(render([(doc.name, doc.summary())]))
    if preempting(config, settings.policy):
        print(f"\n{render_preemption(by_tier(result.preemption))}\n{discarded_line(result.preemption)}")
    latencies = ", ".join(f"{t.value} {s:g}" for t, s in latency.items())
    print(
        f"\n{len(trace.arrivals)} requests simulated in {took_s:.2f} s ({result.events} event times, "
        f"{result.promoted} LOW promoted to MEDIUM; latency s: {latencies})"
    )
    if args.json is not None:
        write_documents(args.json, [doc])
        print(f"wrote {args.json}")
    return 0
