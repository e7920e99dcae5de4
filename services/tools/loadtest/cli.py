"""`inferq loadgen`, `inferq replay`, `inferq trace export`: load tests as users run them.

    inferq loadgen evening-peak --speed 10                 # through HTTP ingest on :8700
    inferq loadgen night-batch --via kafka --speed 60      # straight onto the tier topics
    inferq trace export --from 2025-01-05T20:00 --to 2025-01-05T22:00 --out evening.avro
    inferq replay --trace evening.avro --target-prefix staging --speed 10
    inferq replay --source-prefix inferq --from 1736078400000 --target-prefix lt --speed max --tier HIGH

Kafka options default to the environment every service reads (KAFKA_BOOTSTRAP_SERVERS,
INFERQ_TOPIC_PREFIX). Ctrl-C stops a run cleanly and prints the summary so far (exit code 130).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from inferq.messaging.tiers import Tier
from inferq.tools.loadtest.commands import run_export, run_loadgen, run_replay

_TIERS = [t.value for t in Tier]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _loadgen(subparsers)
    _replay(subparsers)
    _trace(subparsers)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return int(text)


def speed_or_max(text: str) -> float | None:
    """A positive factor, or ``max``: as fast as possible (None)."""
    return None if text.strip().lower() == "max" else positive_float(text)


def _loadgen(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "loadgen",
        help="drive a running pipeline with a scenario (infra/scenarios/*.toml)",
        description="Generate a scenario's trace (seeded) and send it at real time or compressed.",
    )
    p.add_argument(
        "scenario", help="a built-in (evening-peak, steady, overload-10x, night-batch) or a .toml path"
    )
    p.add_argument(
        "--via", choices=["http", "kafka"], default="http", help="HTTP ingest or Kafka (default http)"
    )
    p.add_argument(
        "--ingest-url", default="http://127.0.0.1:8700", help="ingest base URL (default %(default)s)"
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers for --via kafka (default: the environment's)")
    p.add_argument(
        "--topic-prefix", help="topic prefix for --via kafka (default: $INFERQ_TOPIC_PREFIX or inferq)"
    )
    p.add_argument("--speed", type=positive_float, default=1.0, help="10 = ten times faster (default 1)")
    p.add_argument("--seed", type=int, help="trace seed (default: the scenario's)")
    p.add_argument("--run-id", help="tags every request id as <run_id>:<n> (default: a timestamp-based id)")
    p.add_argument("--out", type=Path, help="request records (default .inferq/runs/<run_id>/requests.jsonl)")
    p.add_argument(
        "--max-in-flight",
        type=positive_int,
        default=64,
        help="requests awaiting answers at once (default 64)",
    )
    p.add_argument(
        "--timeout", type=positive_float, default=15.0, help="seconds to wait for one answer (default 15)"
    )
    p.add_argument("--max-requests", type=positive_int, help="send only the first N arrivals (a quick try)")
    p.set_defaults(func=run_loadgen)


def _replay(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "replay",
        help="re-publish recorded requests (a topic range or a trace file) at a chosen speed",
        description=(
            "Re-publish recorded requests into request topics, keeping their gaps scaled by --speed, "
            "with ids rewritten to <run_id>:<original id> and times shifted to now."
        ),
    )
    p.add_argument("--trace", type=Path, help="an exported trace file (else the source topics are read)")
    p.add_argument("--source-bootstrap", help="source cluster (default: the environment's)")
    p.add_argument("--source-prefix", help="source topic prefix (default: $INFERQ_TOPIC_PREFIX or inferq)")
    p.add_argument("--target-bootstrap", help="target cluster (default: the source cluster)")
    p.add_argument("--target-prefix", help="target topic prefix (default: $INFERQ_TOPIC_PREFIX or inferq)")
    _range_args(p)
    p.add_argument("--scenario", action="append", help="only these scenarios (repeatable)")
    p.add_argument(
        "--speed", type=speed_or_max, default=1.0, help="gap divisor, or max (default 1: real time)"
    )
    p.add_argument("--run-id", help="namespace of the rewritten ids (default: a timestamp-based id)")
    p.set_defaults(func=run_replay)


def _trace(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    trace = subparsers.add_parser("trace", help="recorded request traces")
    sub = trace.add_subparsers(dest="trace_command", required=True)
    p = sub.add_parser(
        "export",
        help="write a time range of the request topics to an Avro trace file",
        description="Export requests (schemas/trace_record.avsc, Avro container file) in timestamp order.",
    )
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the environment's)")
    p.add_argument("--topic-prefix", help="topic prefix (default: $INFERQ_TOPIC_PREFIX or inferq)")
    _range_args(p)
    p.add_argument("--out", type=Path, help="trace file (default .inferq/traces/<prefix>-<time>.avro)")
    p.set_defaults(func=run_export)


def _range_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from", dest="from_", metavar="TIME", help="ISO-8601 time or epoch ms (default: the start)"
    )
    p.add_argument(
        "--to",
        metavar="TIME",
        help="ISO-8601 time or epoch ms, exclusive (default: the end when the command starts)",
    )
    p.add_argument("--tier", action="append", choices=_TIERS, help="only these tiers (repeatable)")
