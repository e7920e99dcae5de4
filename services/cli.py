"""The `inferq` command: one subcommand per service and tool."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Register]:
    # Imported here, not at module import: `inferq --help` must not load every client library.
    from services.batch.cli import register as batch
    from services.dispatcher.cli import register as dispatcher
    from services.ingest.cli import register as ingest
    from services.messaging.cli import register as topics
    from services.results.cli import register as results
    from services.tenancy.cli import register as tenants
    from services.tools.bench.cli import register as bench
    from services.tools.broker.cli import register as broker
    from services.tools.demo.cli import register as demo
    from services.tools.loadtest.cli import register as loadtest
    from services.tools.mirror.cli import register as mirror
    from services.tools.redis.cli import register as redis
    from services.tools.report.cli import register as report
    from services.tools.simbackend.cli import register as sim_backend
    from services.tools.simulation.cli import register as simulate
    from services.tools.top.cli import register as top

    return [
        broker,
        mirror,
        redis,
        topics,
        ingest,
        dispatcher,
        results,
        tenants,
        batch,
        sim_backend,
        demo,
        loadtest,
        simulate,
        report,
        top,
        bench,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inferq", description="A priority inference queue on Kafka.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for register in _registrars():
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
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
