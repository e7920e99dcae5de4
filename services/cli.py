"""The `inferq` command: one subcommand per service and tool.

Only the chosen subcommand's module is imported: `inferq --help` and `inferq --version` load no client
library, and a service never loads the tooling. The commands of `inferq.tools` need the tooling's
packages (`pip install 'inferq[tools]'`); without them they say so instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

# name -> (module whose `register` adds it, one-line help shown by `inferq --help`). A module may
# register several names (topics and acls, loadgen/replay/trace); its help texts are its own, these
# stand in for them while it is not imported.
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("inferq.tools.broker.cli", "run the local Apache Kafka broker (KRaft, one node or a cluster)"),
    "mirror": ("inferq.tools.mirror.cli", "run MirrorMaker 2 between the central cluster and regional ones"),
    "redis": ("inferq.tools.redis.cli", "run a local redis-server for the dispatcher group's shared budget"),
    "topics": ("inferq.messaging.cli", "create or list the pipeline's topics"),
    "acls": ("inferq.messaging.cli", "grant each service the least access it needs (Kafka ACLs)"),
    "ingest": ("inferq.ingest.cli", "HTTP ingest: /v1/chat/completions (OpenAI) and /v1/requests"),
    "dispatcher": ("inferq.dispatcher.cli", "dispatcher: tier topics → LLM backend → reply topic"),
    "results": ("inferq.results.cli", "results service: GET /v1/requests/{id} (long poll, SSE), webhooks"),
    "config": (
        "inferq.config.cli",
        "every service's settings: `show` the values in effect, `docs` the table",
    ),
    "tenants": ("inferq.tenancy.cli", "API keys and the tenants file (INFERQ_TENANTS_FILE)"),
    "batch": ("inferq.batch.cli", "send a JSONL file of requests; resumable, with progress"),
    "sim-backend": ("inferq.tools.simbackend.cli", "run the simulated OpenAI-compatible LLM backend"),
    "demo": ("inferq.tools.demo.cli", "run the whole pipeline on a small mixed workload"),
    "loadgen": ("inferq.tools.loadtest.cli", "drive a running pipeline with a scenario"),
    "replay": ("inferq.tools.loadtest.cli", "re-publish recorded requests at a chosen speed"),
    "trace": ("inferq.tools.loadtest.cli", "recorded request traces"),
    "simulate": ("inferq.tools.simulation.cli", "replay an arrival trace through the scheduler, simulated"),
    "report": ("inferq.tools.report.cli", "per-tier statistics, JSON and plots of a recorded run"),
    "top": ("inferq.tools.top.cli", "a live view of the running pipeline from the services' /metrics"),
    "bench": ("inferq.tools.bench.cli", "benchmarks: results go to bench-results/"),
}
TOOLS_EXTRA = "pip install 'inferq[tools]'"
# The top modules of the `tools` extra's packages (pyproject.toml), missing from a production install.
TOOLING_MODULES = frozenset({"testcontainers", "matplotlib", "rich"})


class ToolingMissingError(Exception):
    """A tooling command whose packages are not installed (the `tools` extra)."""


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("inferq")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _register(command: str, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    module_name = COMMANDS[command][0]
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as exc:
        raise _tooling_missing(command, exc) from exc
    module.register(subparsers)


def _tooling_missing(command: str, exc: ModuleNotFoundError) -> Exception:
    """`exc` as the advice to install the tooling when a tooling package is what is missing; as it
    is otherwise (a broken install is not dressed up)."""
    top = (exc.name or "").partition(".")[0]
    if top in TOOLING_MODULES:
        return ToolingMissingError(f"inferq {command} needs {top}: {TOOLS_EXTRA}")
    return exc


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with `command` (if one of ours) registered in full and the others by name only."""
    parser = argparse.ArgumentParser(prog="inferq", description="A priority inference queue on Kafka.")
    parser.add_argument("--version", action="version", version=f"inferq {version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command in COMMANDS:
        _register(command, subparsers)
    for name, (_, help_text) in COMMANDS.items():
        if name not in subparsers.choices:
            subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named in `argv`: its first word that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(_chosen(words)).parse_args(words)
    except ToolingMissingError as exc:
        print(exc, file=sys.stderr)
        return 2
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    try:
        code: int = args.func(args)
    except ModuleNotFoundError as exc:  # a tooling package imported when the command runs
        missing = _tooling_missing(args.command, exc)
        if missing is exc:
            raise
        print(missing, file=sys.stderr)
        return 2
    except ValidationError as exc:
        if not exc.title.endswith("Settings"):
            raise  # not the settings: a bug, with its traceback
        # Settings from the environment that cannot be used: what and why, one line each, never the
        # value given (pydantic's own message quotes the input, which may hold a key or password).
        print(f"inferq {args.command}: invalid settings:\n{settings_errors(exc)}", file=sys.stderr)
        return 2
    except SettingsError as exc:
        # A variable that is not valid JSON where JSON is expected; the message names the field only.
        print(f"inferq {args.command}: invalid settings:\n  {exc}", file=sys.stderr)
        return 2
    return code


def settings_errors(exc: ValidationError) -> str:
    """A settings `ValidationError` as "  <field>: <why>" lines, without the values given."""
    lines = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in error["loc"]) or exc.title
        lines.append(f"  {where}: {error['msg']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
