"""`inferq results`: the results service."""

from __future__ import annotations

import argparse

from services.results.app import create_app
from services.results.settings import ResultsSettings
from services.serving import configure_logging, run_asgi
from services.telemetry import setup_metrics


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("results", help="results service: reply topic → GET /v1/requests/{id}")
    parser.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default 8701)")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    configure_logging()
    settings = ResultsSettings()
    setup_metrics("inferq-results")
    return run_asgi(create_app(settings), args.host or settings.host, args.port or settings.port)
