"""How the services run as processes: logging, an ASGI server, signals."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp


def configure_logging() -> None:
    """One line per event on stderr; level from INFERQ_LOG_LEVEL (default INFO)."""
    logging.basicConfig(
        level=os.environ.get("INFERQ_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO; at our volumes that is noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)


def uvicorn_config(app: ASGIApp, host: str, port: int) -> uvicorn.Config:
    # uvicorn installs SIGTERM/SIGINT handlers that end serving and run the app's lifespan shutdown.
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")


class ServiceServer(uvicorn.Server):
    """uvicorn for a service process: SIGTERM/SIGINT end serving, the lifespan shuts down, exit 0.

    uvicorn re-raises a captured signal after its graceful shutdown, so the process would die by the
    signal (exit -15) even after a clean stop; a supervisor must see 0 for a clean stop.
    """

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def run_asgi(app: ASGIApp, host: str, port: int) -> int:
    """Serve until SIGTERM/SIGINT; 0 on a clean stop, 1 when start-up failed."""
    server = ServiceServer(uvicorn_config(app, host, port))
    server.run()
    return 0 if server.started else 1


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server run inside another component's event loop: it leaves signals to its host."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
