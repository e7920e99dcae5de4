"""`inferq simulate`: argument parsing only; the command lives beside it (`command`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from inferq.dispatcher.policies import POLICIES
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay an arrival trace through the dispatcher's scheduler, in simulated time",
        description=(
            "Discrete-event simulation of TRACE (JSONL of arrivals or an Avro container of requests; "
            "see services/tools/traces/files.py) under the dispatcher's own scheduling code. Options not "
            "given here come from the dispatcher's INFERQ_ settings, as the dispatcher would read them."
        ),
    )
    parser.add_argument(
        "trace", type=Path, help="JSONL trace (offset_ms or created_at_ms per line) or Avro file"
    )
    parser.add_argument(
        "--policy", choices=sorted(POLICIES), help="default INFERQ_DISPATCHER_POLICY or inferq"
    )
    parser.add_argument("--budget", type=int, help="concurrency budget (default INFERQ_BUDGET or 10)")
    parser.add_argument("--schedule", type=Path, help="schedule TOML (default: the built-in table)")
    parser.add_argument("--pin", help="force one window of the schedule, e.g. peak")
    parser.add_argument("--low-peak-ceiling", type=int, help="LOW's ceiling in the peak window")
    parser.add_argument("--timezone", help="whose hours the schedule's windows are (default UTC)")
    parser.add_argument(
        "--start",
        help="ISO time of offset_ms 0 (default 2024-01-01T20:00 in the schedule's timezone: the peak)",
    )
    parser.add_argument(
        "--latency",
        action="append",
        default=[],
        metavar="MODEL=SECONDS",
        help="backend latency of a model or tier: fast|HIGH, accurate|MEDIUM, cheap|LOW "
        f"({'/'.join(f'{s:g}' for s in DEFAULT_MEAN_LATENCY_S.values())})",
    )
    parser.add_argument(
        "--latency-from",
        type=Path,
        help="take each tier's mean inference time (OK: completed - dispatched) from a results JSONL "
        "or a report/simulate JSON; --latency options still override",
    )
    parser.add_argument(
        "--jitter", type=float, default=0.0, help="log-normal sigma of each call's latency (0: exact)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the jitter")
    parser.add_argument(
        "--promotion-age", type=float, help="seconds before a waiting LOW is served as MEDIUM"
    )
    parser.add_argument(
        "--no-early-drop", action="store_true", help="do not drop requests that would be late"
    )
    parser.add_argument(
        "--forecast-lending",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="lend slots past the ceilings when the higher tiers' forecast allows "
        "(INFERQ_DISPATCHER_FORECAST_LENDING, off by default)",
    )
    parser.add_argument(
        "--preemptible",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the backend frees a slot when its client hangs up: calls lent past a ceiling are "
        "cancelled for a higher tier, and the cost shown (INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE, "
        "off by default; backends of INFERQ_DISPATCHER_BACKENDS keep their own setting)",
    )
    parser.add_argument(
        "--max-preemptions",
        type=int,
        help="times a request may be preempted before it is lent no more slots past its ceiling "
        "(default INFERQ_DISPATCHER_MAX_PREEMPTIONS or 3)",
    )
    parser.add_argument("--readahead", type=int, help="requests per tier held by the dispatcher (default 20)")
    parser.add_argument("--name", help="the run's name in tables and plots")
    parser.add_argument("--json", type=Path, help="write the simulation document (summary and outcomes) here")

    def run(args: argparse.Namespace) -> int:
        from inferq.tools.simulation.command import (
            run_simulate,  # the dispatcher's modules load on use only
        )

        return run_simulate(args)

    parser.set_defaults(func=run)
