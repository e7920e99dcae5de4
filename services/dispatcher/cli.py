"""`inferq dispatcher`: one member of the dispatcher consumer group."""

from __future__ import annotations

import argparse
import os
import sys

import uvloop

from inferq.dispatcher.errors import SessionTimeoutRefusedError
from inferq.dispatcher.process import serve
from inferq.dispatcher.settings import READ_BY_DISPATCHER, DispatcherSettings
from inferq.messaging.errors import KafkaAccessError, MissingTopicsError
from inferq.serving import configure_logging
from inferq.settings.renamed import log_renamed
from inferq.settings.table import help_text, settings_in
from inferq.tenancy.errors import TenantsFileError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "dispatcher",
        help="dispatcher: tier topics → LLM backend → reply topic",
        epilog=help_text(settings_in(READ_BY_DISPATCHER)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=None, help="metrics bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="metrics port (default 8702)")
    parser.add_argument("--budget", type=int, default=None, help="concurrency budget (default 10)")
    parser.add_argument(
        "--policy",
        choices=["inferq", "static", "fifo"],
        default=None,
        help="scheduling policy (default inferq)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    configure_logging()
    log_renamed(READ_BY_DISPATCHER, os.environ)
    overrides: dict[str, object] = {}
    if args.host:
        overrides["metrics_host"] = args.host
    if args.port:
        overrides["metrics_port"] = args.port
    if args.budget:
        overrides["budget"] = args.budget
    if args.policy:
        overrides["policy"] = args.policy
    settings = DispatcherSettings(**overrides)  # type: ignore[arg-type]
    # uvloop: the dispatcher's hot path is the event loop (fetch, HTTP calls, delivery reports).
    try:
        return uvloop.run(serve(settings))
    except (MissingTopicsError, KafkaAccessError, TenantsFileError, SessionTimeoutRefusedError) as exc:
        # A start-up refusal the operator must act on: one line that says what, not a traceback.
        print(f"inferq dispatcher: cannot start: {exc}", file=sys.stderr)
        return 2
