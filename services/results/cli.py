"""`inferq results`: the results service."""

from __future__ import annotations

import argparse
import os
import sys

from inferq.results.app import create_app
from inferq.results.settings import READ_BY_RESULTS, ResultsSettings
from inferq.serving import SideListener, configure_logging, run_asgi
from inferq.settings.renamed import log_renamed
from inferq.settings.table import help_text, settings_in
from inferq.telemetry import metrics_app, setup_metrics
from inferq.tenancy.bind import require_tenants_or_loopback
from inferq.tenancy.errors import OpenModeRefusedError, TenantsFileError
from inferq.tracing import setup_tracing, traced_asgi


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "results",
        help="results service: reply topic → GET /v1/requests/{id} (?wait= long poll, /events SSE)",
        epilog=help_text(settings_in(READ_BY_RESULTS)),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default 8701)")
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="port of /metrics (default 8704; 0: any free port)"
    )
    parser.add_argument(
        "--region",
        default=None,
        metavar="NAME|all",
        help=(
            "serve the reply topic of region NAME (<prefix>.results.NAME), or all of them and the "
            "results topic (default: $INFERQ_RESULTS_REGION, else the results topic alone)"
        ),
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    configure_logging()
    log_renamed(READ_BY_RESULTS, os.environ)
    settings = ResultsSettings(**({"region": args.region} if args.region is not None else {}))
    host = args.host or settings.host
    try:
        require_tenants_or_loopback(host, settings.tenants.file)
        setup_tracing("inferq-results", consumer_group=settings.consumer_group)
        app = create_app(settings, reload_on_sighup=True)
    except (OpenModeRefusedError, TenantsFileError) as exc:
        print(f"inferq results: not started: {exc}", file=sys.stderr)
        return 2
    setup_metrics("inferq-results")
    metrics = _metrics_listener(args, settings, host)
    return run_asgi(traced_asgi(app), host, args.port or settings.port, side=[metrics])


def _metrics_listener(args: argparse.Namespace, settings: ResultsSettings, host: str) -> SideListener:
    """/metrics on its own port (it names the tenants): the API port answers 404 for it."""
    port = args.metrics_port if args.metrics_port is not None else settings.metrics_port
    return SideListener(metrics_app(), settings.metrics_host or host, port, "metrics")
