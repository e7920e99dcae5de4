"""`inferq top`: argument parsing only; the loop lives beside it (`command`)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "top",
        help="a live view of the running pipeline from the services' /metrics",
        description=(
            "Per tier: waiting, read ahead, running, budget share, floor and ceiling of the schedule's "
            "window, queue-wait P95, rates, consumer lag, paused partitions and backlog fill; the "
            "window and the effective budget above. Refreshes every second; Ctrl-C quits."
        ),
    )
    parser.add_argument(
        "--dispatcher",
        action="append",
        metavar="URL",
        help="a dispatcher's metrics address, repeatable (default http://127.0.0.1:8702)",
    )
    parser.add_argument(
        "--ingest",
        action="append",
        metavar="URL",
        help="an ingest's metrics address (its --metrics-port), repeatable (default http://127.0.0.1:8703)",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    parser.add_argument(
        "--window", type=float, default=30.0, help="seconds the rates and the wait P95 cover (default 30)"
    )
    parser.add_argument("--once", action="store_true", help="print one frame (after two scrapes) and exit")

    def run(args: argparse.Namespace) -> int:
        from inferq.tools.top.command import run_top  # rich and httpx load on use only

        if args.interval <= 0 or args.window <= 0:
            parser.error("--interval and --window must be > 0")
        args.dispatcher = args.dispatcher or ["http://127.0.0.1:8702"]
        args.ingest = args.ingest or ["http://127.0.0.1:8703"]
        return run_top(args)

    parser.set_defaults(func=run)
