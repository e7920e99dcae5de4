"""`inferq bench scheduling|memory`: benchmarks that write results to files (bench-results/)."""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_OUT = Path("bench-results")
DEFAULT_HOME = Path(".inferq/bench")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bench", help="benchmarks: results go to bench-results/")
    kinds = parser.add_subparsers(dest="bench", required=True)

    sched = kinds.add_parser(
        "scheduling", help="every policy on the same time-compressed evening peak, against the real pipeline"
    )
    sched.add_argument("--compress", type=float, default=10.0, help="time compression S (default 10)")
    sched.add_argument(
        "--duration", type=float, default=60.0, help="wall-clock seconds of steady arrivals (default 60)"
    )
    sched.add_argument(
        "--briefs", type=int, default=300, help="morning briefs dumped at the start (default 300)"
    )
    sched.add_argument("--seed", type=int, default=2024, help="seed of the arrival trace (default 2024)")
    sched.add_argument(
        "--runs",
        default="inferq,inferq-lifted,static,fifo",
        help="comma-separated runs, in order (default: inferq,inferq-lifted,static,fifo)",
    )
    sched.add_argument(
        "--budget", type=int, default=10, help="the backend's concurrency limit B (default 10)"
    )
    sched.add_argument(
        "--timeout", type=float, default=None, help="bound of the wait for every outcome, per run"
    )
    _common(sched)
    sched.set_defaults(func=_scheduling)

    mem = kinds.add_parser("memory", help="dispatcher RSS with a million LOW requests waiting in Kafka")
    mem.add_argument(
        "--records", type=int, default=1_000_000, help="LOW requests produced (default 1,000,000)"
    )
    mem.add_argument(
        "--seconds", type=float, default=30.0, help="how long each dispatcher is sampled (default 30)"
    )
    mem.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples (default 0.5)")
    mem.add_argument("--budget", type=int, default=2, help="the dispatcher's budget (default 2)")
    mem.add_argument("--speed", type=float, default=0.5, help="simulated backend speed (default 0.5: slow)")
    _common(mem)
    mem.set_defaults(func=_memory)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="results folder (default bench-results)"
    )
    parser.add_argument(
        "--home", type=Path, default=DEFAULT_HOME, help="broker data and service logs (default .inferq/bench)"
    )


def _scheduling(args: argparse.Namespace) -> int:
    # Imported here: `inferq --help` must not load the Kafka clients.
    from services.bench import scheduling
    from services.bench.runs import run_specs
    from services.bench.trace import TraceSpec

    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in runs if r not in run_specs(args.budget)]
    if unknown or not runs:
        known = ", ".join(run_specs(args.budget))
        raise SystemExit(
            f"inferq bench scheduling: unknown run(s) {unknown or '(none)'}; choose from {known}"
        )
    spec = TraceSpec(seed=args.seed, duration_s=args.duration, compress=args.compress, briefs=args.briefs)
    return scheduling.run(
        spec, runs, budget=args.budget, out=args.out, home=args.home.resolve(), timeout_s=args.timeout
    )


def _memory(args: argparse.Namespace) -> int:
    from services.bench import memory

    return memory.run(
        args.records,
        budget=args.budget,
        speed=args.speed,
        seconds=args.seconds,
        interval_s=args.interval,
        out=args.out,
        home=args.home.resolve(),
    )
