"""`inferq ingest`: the HTTP ingest service."""

from __future__ import annotations

import argparse
import os
import sys

from inferq.ingest.app import create_app
from inferq.ingest.settings import READ_BY_INGEST, IngestSettings
from inferq.serving import SideListener, configure_logging, run_asgi
from inferq.settings.renamed import log_renamed
from inferq.settings.table import help_text, settings_in
from inferq.telemetry import metrics_app, setup_metrics
from inferq.tenancy.bind import require_tenants_or_loopback
from inferq.tenancy.errors import OpenModeRefusedError, TenantsFileError
from inferq.tracing import setup_tracing, traced_asgi


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "ingest",
        help="HTTP ingest: POST /v1/chat/completions (OpenAI) and /v1/requests → priority topics",
        epilog=help_text(settings_in(READ_BY_INGEST)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default 8700)")
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="port of /metrics (default 8703; 0: any free port)"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    configure_logging()
    log_renamed(READ_BY_INGEST, os.environ)
    settings = IngestSettings()
    host = args.host or settings.host
    port = args.port or settings.port
    try:
        require_tenants_or_loopback(host, settings.tenants.file)
        setup_tracing("inferq-ingest")
        app = create_app(settings, reload_on_sighup=True)
    except (OpenModeRefusedError, TenantsFileError) as exc:
        print(f"inferq ingest: not started: {exc}", file=sys.stderr)
        return 2
    setup_metrics("inferq-ingest")
    return run_asgi(traced_asgi(app), host, port, side=[_metrics_listener(args, settings, host)])


def _metrics_listener(args: argparse.Namespace, settings: IngestSettings, host: str) -> SideListener:
    """/metrics on its own port (it names the tenants): the API port answers 404 for it."""
    port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
    return SideListener(metrics_app(), settings.metrics_host or host, port, "metrics")
