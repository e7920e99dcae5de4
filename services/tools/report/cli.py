"""`inferq report`: argument parsing only; the command lives beside it (`command`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report",
        help="per-tier statistics, JSON and plots of a recorded run (and others side by side)",
        description=(
            "Reads the results of RUN_ID (request ids <RUN_ID>:<n>) from <prefix>.results, from the "
            "beginning up to the end offsets at start, and .inferq/runs/<RUN_ID>/requests.jsonl when "
            "present. A RUN_ID that is a .json file is a simulate/report document instead."
        ),
    )
    parser.add_argument("run_id", help="run id, or a simulate/report .json document")
    parser.add_argument(
        "--compare",
        nargs="+",
        default=[],
        metavar="RUN_ID",
        help="more runs or .json documents, side by side",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or "127.0.0.1:9092",
        help="Kafka bootstrap servers (default $KAFKA_BOOTSTRAP_SERVERS or 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--topic-prefix",
        default=os.environ.get("INFERQ_TOPIC_PREFIX") or "inferq",
        help="topic prefix (default $INFERQ_TOPIC_PREFIX or inferq)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        help="the budget utilization is measured against (default $INFERQ_BUDGET or 10)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        default=os.environ.get("INFERQ_PROMETHEUS_URL") or None,
        help="a Prometheus that scraped the dispatchers: the effective budget over each run is read from it "
        "and drawn, and what preemption cost per tier shown (default $INFERQ_PROMETHEUS_URL; none: neither)",
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=[],
        metavar="URL_OR_FILE",
        help="dispatchers' /metrics pages (URLs or saved files): preemptions, tokens discarded and requests "
        "at the preemption limit per tier, summed over them (docs/operations.md)",
    )
    parser.add_argument("--runs-dir", type=Path, default=Path(".inferq/runs"), help="where run records live")
    parser.add_argument("--out", type=Path, help="output folder (default <runs-dir>/<RUN_ID>/report/)")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound of the topic read, seconds")
    parser.add_argument(
        "--tenant",
        type=_tenant,
        default=None,
        metavar="NAME",
        help="only this tenant's results (and request records): its waits, outcomes, tokens in use",
    )

    def run(args: argparse.Namespace) -> int:
        from inferq.tools.report.command import (
            run_report,  # matplotlib and librdkafka load on use only
        )

        return run_report(args)

    parser.set_defaults(func=run)


def _tenant(name: str) -> str:
    from inferq.tools.report.tenants import check_tenant

    try:
        return check_tenant(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
