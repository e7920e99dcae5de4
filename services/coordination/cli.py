"""``inferq redis start|stop|status``: the project's own redis-server for the dispatchers' shared budget.

Exit codes: 0 success (``status``: running), 1 error, 2 bad option/environment, 3 ``status``: not running.
The port is ``--port``, else ``$INFERQ_REDIS_PORT``, else the last start's in ``--home``, else 6379.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from services.coordination.errors import LocalRedisError
from services.coordination.localredis import (
    DEFAULT_PORT,
    ENSURE_SCRIPT,
    LocalRedis,
    RedisConfig,
    recorded_port,
)

PORT_ENV = "INFERQ_REDIS_PORT"
STATE_DIR = Path(".inferq") / "redis"
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_RUNNING = 3  # as LSB init scripts' "status": program is not running


class _UsageError(Exception):
    """A bad option or environment value; reported with exit code 2."""


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
    start.set_defaults(func=_cmd_start)

    stop = commands.add_parser("stop", help="stop redis-server (SIGTERM, then SIGKILL)")
    _add_common(stop)
    stop.add_argument(
        "--timeout", type=float, default=10.0, help="seconds before SIGKILL (default: %(default)s)"
    )
    stop.set_defaults(func=_cmd_stop)

    status = commands.add_parser("status", help="show whether redis-server runs (exit 3 when it does not)")
    _add_common(status)
    status.set_defaults(func=_cmd_status)


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


def _project_root() -> Path:
    """The nearest folder at or above the cwd holding the install script, else this checkout."""
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / ENSURE_SCRIPT).is_file():
            return folder
    checkout = Path(__file__).resolve().parents[2]
    return checkout if (checkout / ENSURE_SCRIPT).is_file() else here


def _server_from_args(args: argparse.Namespace) -> LocalRedis:
    home: Path = (args.home or _project_root() / STATE_DIR).resolve()
    port: int | None = args.port
    if port is None and os.environ.get(PORT_ENV):
        try:
            port = int(os.environ[PORT_ENV])
        except ValueError as exc:
            raise _UsageError(f"${PORT_ENV} must be a port number, got {os.environ[PORT_ENV]!r}") from exc
    if port is None:
        port = recorded_port(home) or DEFAULT_PORT
    try:
        return LocalRedis(RedisConfig(home=home, port=port))
    except ValueError as exc:
        raise _UsageError(str(exc)) from exc


def _run(action: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return action(args)
    except _UsageError as exc:
        print(f"inferq redis: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except LocalRedisError as exc:
        print(f"inferq redis: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _cmd_start(args: argparse.Namespace) -> int:
    def action(ns: argparse.Namespace) -> int:
        server = _server_from_args(ns)
        status = server.status()
        if status.running and server.answers():
            print(f"redis-server already running at {status.url} (pid {status.pid}, home {status.home})")
            return EXIT_OK
        seconds = server.start(timeout_s=ns.timeout)
        status = server.status()
        print(
            f"redis-server started at {status.url} (pid {status.pid}) in {seconds:.2f}s; "
            f"log: {server.config.log_file}"
        )
        return EXIT_OK

    return _run(action, args)


def _cmd_stop(args: argparse.Namespace) -> int:
    def action(ns: argparse.Namespace) -> int:
        server = _server_from_args(ns)
        status = server.status()
        server.stop(timeout_s=ns.timeout)
        if status.running:
            print(f"redis-server stopped (pid {status.pid}, {status.url})")
        else:
            print(f"redis-server was not running (home {status.home})")
        return EXIT_OK

    return _run(action, args)


def _cmd_status(args: argparse.Namespace) -> int:
    def action(ns: argparse.Namespace) -> int:
        server = _server_from_args(ns)
        status = server.status()
        if not status.running:
            print(f"redis-server not running (home {status.home})")
            return EXIT_NOT_RUNNING
        state = "answering" if server.answers() else "not answering yet"
        print(f"redis-server running at {status.url} (pid {status.pid}, {state}, home {status.home})")
        return EXIT_OK

    return _run(action, args)
