"""``inferq broker start|stop|status``: manage the project's local Kafka broker from the shell.

Exit codes: 0 success (``status``: running), 1 error, 2 bad option/environment, 3 ``status``: not running.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from services.tools.broker.broker import (
    DEFAULT_CONTROLLER_PORT,
    DEFAULT_PORT,
    BrokerConfig,
    LocalBroker,
    recorded_ports,
)
from services.tools.broker.errors import LocalBrokerError
from services.tools.broker.jars import STATE_DIR, ensure_jars
from services.tools.paths import find_project_root
from services.tools.servercli import EXIT_OK, ServerCommands, UsageError, port_from_env

PORT_ENV = "INFERQ_BROKER_PORT"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``broker`` command (``start``, ``stop``, ``status``) to a top-level subparsers object.

    Each leaf parser sets ``func``: a callable taking the parsed Namespace and returning the exit code.
    """
    broker = subparsers.add_parser(
        "broker",
        help="run the local Apache Kafka broker (KRaft, single node, no Docker)",
        description="Run the real Apache Kafka broker locally from Maven jars (Java 17+ and Maven needed).",
    )
    commands = broker.add_subparsers(dest="broker_command", metavar="{start,stop,status}", required=True)

    start = commands.add_parser("start", help="start the broker (idempotent) and wait until it answers")
    _add_common(start)
    start.add_argument("--heap", default="1g", help="JVM max heap, e.g. 512m or 1g (default: %(default)s)")
    start.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for readiness (default: %(default)s)"
    )
    start.set_defaults(func=COMMANDS.start)

    stop = commands.add_parser("stop", help="stop the broker: SIGTERM, then SIGKILL after --timeout")
    _add_common(stop)
    stop.add_argument(
        "--timeout", type=float, default=30.0, help="seconds before SIGKILL (default: %(default)s)"
    )
    stop.set_defaults(func=COMMANDS.stop)

    status = commands.add_parser("status", help="show whether the broker runs (exit 3 when it does not)")
    _add_common(status)
    status.set_defaults(func=COMMANDS.status)

    jars = commands.add_parser("jars", help="fetch the broker's jars from Maven Central (once; cached)")
    jars.set_defaults(func=_cmd_jars)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=(
            f"client (PLAINTEXT) port; default ${PORT_ENV}, else the last start's in --home, "
            f"else {DEFAULT_PORT}"
        ),
    )
    parser.add_argument(
        "--controller-port",
        type=int,
        default=None,
        help=f"KRaft controller port (default: the last start's in --home, else {DEFAULT_CONTROLLER_PORT})",
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help=f"broker home (data, logs, pid file); default: <project root>/{STATE_DIR}",
    )


def _broker_from_args(args: argparse.Namespace, *, heap: str = "1g") -> LocalBroker:
    try:
        project_root = find_project_root(Path.cwd())
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    home: Path = (args.home or project_root / STATE_DIR).resolve()
    # For stop/status (and an idempotent start) the ports of the last start are the truth, not defaults.
    recorded = recorded_ports(home)
    port: int | None = args.port or port_from_env(PORT_ENV)
    if port is None:
        port = recorded[0] if recorded else DEFAULT_PORT
    cport: int = args.controller_port or (recorded[1] if recorded else DEFAULT_CONTROLLER_PORT)
    for value in (port, cport):
        if not 0 < value < 65536:
            raise UsageError(f"port out of range: {value}")
    return LocalBroker(
        BrokerConfig(home=home, port=port, controller_port=cport, heap=heap, project_root=project_root)
    )


def _build(ns: argparse.Namespace) -> LocalBroker:
    return _broker_from_args(ns, heap=getattr(ns, "heap", "1g"))


COMMANDS = ServerCommands[LocalBroker](
    prog="inferq broker",
    label="Kafka broker",
    errors=LocalBrokerError,
    build=_build,
    address=lambda broker: broker.bootstrap,
    log_path=lambda broker: broker.config.server_log,
)


def _cmd_jars(args: argparse.Namespace) -> int:
    def action(_: argparse.Namespace) -> int:
        print(f"Kafka jars ready in {ensure_jars(find_project_root())}")
        return EXIT_OK

    return COMMANDS.run(action, args)
