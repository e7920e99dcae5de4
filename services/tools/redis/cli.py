"""``inferq redis start|stop|status``: the project's own redis-server for the dispatchers' shared budget.

Exit codes: 0 success (``status``: running), 1 error, 2 bad option/environment, 3 ``status``: not running.
The port is ``--port``, else ``$INFERQ_REDIS_PORT``, else the last start's in ``--home``, else 6379.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from inferq.tools.paths import find_project_root
from inferq.tools.redis.errors import LocalRedisError
from inferq.tools.redis.server import (
    DEFAULT_PORT,
    ENSURE_SCRIPT,
    LocalRedis,
    RedisConfig,
    recorded_port,
)
from inferq.tools.servercli import ServerCommands, UsageError, port_from_env

PORT_ENV = "INFERQ_REDIS_PORT"
STATE_DIR = Path(".inferq") / "redis"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``redis`` command (``start``, ``stop``, ``status``) to a top-level subparsers object.

    Each leaf parser sets ``func``: a callable taking the parsed Namespace and returning the exit code.
    """
    redis = subparsers.add_parser(
        "redis",
        help="run a local redis-server for the dispatcher group's shared budget",
        description=(
            "Start, stop or check a local redis-server (127.0.0.1, in memory only). "
            f"Install redis-server first with `bash {ENSURE_SCRIPT}`."
        ),
    )
    commands = redis.add_subparsers(dest="redis_command", required=True)

    start = commands.add_parser("start", help="start redis-server and wait until it answers PING")
    _add_common(start)
    start.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for PING (default: %(default)s)"
    )
    start.set_defaults(func=COMMANDS.start)

    stop = commands.add_parser("stop", help="stop redis-server (SIGTERM, then SIGKILL)")
    _add_common(stop)
    stop.add_argument(
        "--timeout", type=float, default=10.0, help="seconds before SIGKILL (default: %(default)s)"
    )
    stop.set_defaults(func=COMMANDS.stop)

    status = commands.add_parser("status", help="show whether redis-server runs (exit 3 when it does not)")
    _add_common(status)
    status.set_defaults(func=COMMANDS.status)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"TCP port; default ${PORT_ENV}, else the last start's in --home, else {DEFAULT_PORT}",
    )
    parser.add_argument(
        "--home",
        type=Path,
        default=None,
        help=f"folder of the pid, port and log files; default: <project root>/{STATE_DIR}",
    )


def _server_from_args(args: argparse.Namespace) -> LocalRedis:
    home: Path = (args.home or find_project_root() / STATE_DIR).resolve()
    port: int | None = args.port or port_from_env(PORT_ENV)
    if port is None:
        port = recorded_port(home) or DEFAULT_PORT
    try:
        return LocalRedis(RedisConfig(home=home, port=port))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


COMMANDS = ServerCommands[LocalRedis](
    prog="inferq redis",
    label="redis-server",
    errors=LocalRedisError,
    build=_server_from_args,
    address=lambda server: server.url,
    log_path=lambda server: server.config.log_file,
)
