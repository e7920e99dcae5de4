"""`inferq sim-backend`: run the simulated LLM backend under uvicorn.

Settings come from `INFERQ_SIM_*` environment variables; command-line options override them. There is no
`--api-key` option on purpose: a key on the command line is visible to every user in `ps`; set
`INFERQ_SIM_API_KEY` instead.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

import uvicorn
from pydantic import ValidationError

from inferq.tools.simbackend.app import create_app
from inferq.tools.simbackend.hangup import OnHangup
from inferq.tools.simbackend.settings import SimBackendSettings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8780
# Calls still running at shutdown get this long to finish; the slowest default model takes 5 s at speed 1.
GRACEFUL_SHUTDOWN_S = 10


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sim-backend",
        help="run the simulated OpenAI-compatible LLM backend",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default: %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to bind (default: %(default)s)")
    # None means "not given": only options the user typed override the environment.
    parser.add_argument("--limit", type=int, help="calls allowed in progress at once (default 10)")
    parser.add_argument("--speed", type=float, help="divide every latency by this factor (default 1)")
    parser.add_argument("--error-rate", type=float, help="fraction of calls answered 500/503 (default 0)")
    parser.add_argument(
        "--stream-drop-rate", type=float, help="fraction of streamed calls broken mid-stream (default 0)"
    )
    parser.add_argument(
        "--latency",
        type=_model_latency,
        action="append",
        metavar="MODEL=SECONDS",
        help="latency of one model at speed 1; repeatable",
    )
    parser.add_argument("--seed", type=int, help="seed jitter and error draws for a reproducible run")
    parser.add_argument("--rpm", type=int, help="requests per minute; past it 429 (default: no limit)")
    parser.add_argument("--tpm", type=int, help="tokens per minute; past it 429 (default: no limit)")
    parser.add_argument(
        "--on-hangup",
        choices=[mode.value for mode in OnHangup],
        help="a call whose client hangs up: keep (runs on, holds its slot: a hosted API) or free (stops and "
        "frees its slot at once: vLLM, TGI) (default keep)",
    )
    parser.set_defaults(func=run)


def _model_latency(text: str) -> tuple[str, float]:
    model, sep, seconds = text.partition("=")
    try:
        value = float(seconds)
    except ValueError:
        value = -1.0
    if not sep or not model or value < 0:
        raise argparse.ArgumentTypeError(f"expected MODEL=SECONDS with SECONDS >= 0, got {text!r}")
    return model, value


def settings_from_args(args: argparse.Namespace) -> SimBackendSettings:
    """Environment settings with the options given on the command line laid over them."""
    from_env = SimBackendSettings()
    overrides: dict[str, object] = {
        name: getattr(args, name)
        for name in ("limit", "speed", "error_rate", "stream_drop_rate", "seed", "rpm", "tpm", "on_hangup")
        if getattr(args, name) is not None
    }
    if args.latency:
        overrides["latency_s"] = {**from_env.latency_s, **dict(args.latency)}
    # Validated again, so an option gets the same checks as its environment variable.
    return SimBackendSettings.model_validate({**from_env.model_dump(), **overrides})


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ValidationError as exc:
        print(f"inferq sim-backend: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = uvicorn.Server(config)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        # Uvicorn handles SIGINT/SIGTERM while it serves, then re-raises the signal to this handler once it
        # has shut down. A stop request instead of the default (die, or KeyboardInterrupt) lets the command
        # exit 0; it also covers a signal arriving before uvicorn installs its own handlers.
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    print(
        f"inferq sim-backend: starting on http://{args.host}:{args.port} (limit {settings.limit}, "
        f"speed {settings.speed}, error_rate {settings.error_rate}, on hang-up {settings.on_hangup.value}, "
        f"auth {'on' if settings.api_key else 'off'})",
        file=sys.stderr,
    )
    try:
        server.run()
    except SystemExit as exc:
        # Uvicorn exits the process when it cannot bind or start; its message is already logged.
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
