"""`inferq config show [--service X]` and `inferq config docs`."""

from __future__ import annotations

import argparse
import os
import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError

from inferq.cli import settings_errors
from inferq.config.table import SERVICES, markdown, show_lines
from inferq.serving import configure_logging
from inferq.settings.renamed import log_renamed


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("config", help="every service's settings: the values in effect, the docs")
    commands = parser.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    show = commands.add_parser(
        "show", help="the configuration in effect from the environment, secrets masked (NAME=value lines)"
    )
    show.add_argument("--service", choices=sorted(SERVICES), default=None, help="one service (default: all)")
    show.set_defaults(func=_show)
    docs = commands.add_parser("docs", help="docs/configuration.md: every setting, generated from the models")
    docs.set_defaults(func=_docs)


def _show(args: argparse.Namespace) -> int:
    configure_logging()
    services = [args.service] if args.service else list(SERVICES)
    for service in services:
        log_renamed(SERVICES[service], os.environ)
    try:
        for service in services:
            print(f"# {service}")
            for line in show_lines(service):
                print(line)
    except (ValidationError, SettingsError) as exc:
        # Never pydantic's own message: it may quote a value, and a value may be a secret.
        why = settings_errors(exc) if isinstance(exc, ValidationError) else f"  {exc}"
        print(f"inferq config: invalid settings:\n{why}", file=sys.stderr)
        return 2
    return 0


def _docs(_: argparse.Namespace) -> int:
    sys.stdout.write(markdown())
    return 0
