"""How the services run as processes: logging, an ASGI server with bounded connections, signals.

Every HTTP server of inferq is uvicorn with `HttpLimits` (env prefix ``INFERQ_HTTP_``):

- at most `limit_concurrency` connections and requests at once; past it uvicorn answers 503 to
  everyone. It is the process's backstop, not a share: each tenant's own requests in progress are
  bounded far below it (``limits.connections``, default 200, answered 429 past it with the
  connection closed: `inferq.tenancy.held_connections`), so one tenant at every one of its limits
  holds under a twentieth of the default 4,096 and the others keep being served. Size it above
  the sum of ``limits.connections`` of the tenants expected to be busy at once, plus idle
  keep-alive connections; a request without a valid key is answered 401 at once and holds
  nothing. The process's open-files limit is raised to fit it where the hard limit allows
  (`fit_open_files`);
- an idle keep-alive connection is closed after `timeout_keep_alive_s`;
- a request's line and headers must arrive within `header_timeout_s` of its first byte (of the
  connection, for the first request), else 408 and the connection is closed: uvicorn's httptools
  protocol has no such deadline, so a client that connects and trickles (or sends nothing) would
  hold a connection slot forever;
- the request line and headers may take at most `max_header_bytes`, else 431 and the connection is
  closed: httptools has no such bound either, and buffers one header value whole;
- on SIGTERM, requests in progress (long polls, event streams, chat completions) get
  `graceful_shutdown_s` to end before they are cancelled and the lifespan shuts down; unset, they
  are waited for without bound (an orchestrator's kill deadline must then cover the longest one).

The body's own deadline belongs to the endpoint that reads it (ingest's body reader answers 408).
A service may serve a second app on a port of its own (`SideListener`: ingest's and the results
service's /metrics), bound before the service starts and stopped after its API.

A service that has stopped cleanly exits within `EXIT_GRACE_S` (`bound_exit`). After a clean stop
everything durable is committed and flushed; what is left is the runtime's own exit: the event loop
joins its default executor's threads (without a bound in Python 3.11), then the interpreter joins
non-daemon threads and destroys librdkafka handles. A blocking Kafka call left in a thread against
an unreachable broker can make that outlast an orchestrator's grace period (seen: a dispatcher that
logged "stopped cleanly" after a broker was killed, then SIGKILLed 20 s later). Past the grace, every
thread's stack goes to stderr (naming the holder) and the process ends with the clean stop's code.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import resource
import signal
import socket
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from inferq.log_format import formatter

EXIT_GRACE_S = 10.0
# A side listener (a service's /metrics) gets this long to stop once the API has.
SIDE_STOP_S = 5.0
log = logging.getLogger(__name__)


class HttpLimits(BaseSettings):
    """Bounds of every HTTP server (env prefix ``INFERQ_HTTP_``)."""

    model_config = SettingsConfigDict(
        env_prefix="INFERQ_HTTP_", extra="ignore", use_attribute_docstrings=True
    )

    limit_concurrency: int = Field(default=4_096, ge=1)
    """Connections plus requests in progress, all tenants together; past it new requests get 503 at
    once. Keep it above the sum of the busy tenants' limits.connections (default 200 each): one
    tenant at its limits then never reaches it (docs/tenants.md, "Held resources")."""
    backlog: int = Field(default=2_048, ge=1)
    """Connections the kernel queues before accept()."""
    timeout_keep_alive_s: int = Field(default=5, ge=1, le=300)
    """An idle keep-alive connection is closed after this."""
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    """A request's line and headers must arrive within this of its first byte."""
    max_header_bytes: int = Field(default=16_384, ge=1_024, le=1_048_576)
    """Request line plus headers; past it 431."""
    graceful_shutdown_s: int | None = Field(default=None, ge=1, le=3_600)
    """On SIGTERM, requests in progress get this long to end, then are cancelled; None: no bound."""


class LogSettings(BaseSettings):
    """How every service logs (env prefix ``INFERQ_LOG_``)."""

    model_config = SettingsConfigDict(env_prefix="INFERQ_LOG_", extra="ignore", use_attribute_docstrings=True)

    level: str = "INFO"
    """The least severe level logged: DEBUG, INFO, WARNING, ERROR."""
    format: str = "text"
    """text (one readable line per event) or json (one JSON object per line; `inferq.log_format`)."""


def configure_logging() -> None:
    """One line per event on stderr; level from INFERQ_LOG_LEVEL (default INFO), text or JSON lines
    from INFERQ_LOG_FORMAT (default text; see `inferq.log_format`). An unknown format ends the
    process with a message naming the choices."""
    chosen_log = LogSettings()
    try:
        chosen = formatter(chosen_log.format.strip().lower())
    except ValueError as exc:
        raise SystemExit(f"inferq: {exc}") from None
    handler = logging.StreamHandler()
    handler.setFormatter(chosen)
    logging.basicConfig(level=chosen_log.level.upper(), handlers=[handler])
    # httpx logs every request at INFO; at our volumes that is noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)


class _GuardedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a header size bound (`HttpLimits`).

    The bookkeeping runs in the parser's callbacks, which the protocol already has per header; a
    refused request is answered at once and never reaches the app.
    """

    limits: HttpLimits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._refused = False
        self._header_bytes = 0
        self._header_deadline: asyncio.TimerHandle | None = None
        self._in_headers = True
        super().connection_made(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        # One header value is buffered whole by httptools before `on_header` sees it: bound the
        # bytes received while the headers are incomplete as well.
        if self._in_headers and not self._refused:
            self._header_bytes += len(data)
            if self._header_bytes > self.limits.max_header_bytes:
                self._refuse(431, "Request header fields too large.")

    def send_400_response(self, msg: str) -> None:
        if not self._refused:
            super().send_400_response(msg)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._header_bytes = 0
        self._arm_header_deadline()

    def on_url(self, url: bytes) -> None:
        self._count_header_bytes(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._disarm_header_deadline()
        if not self._refused:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def _count_header_bytes(self, size: int) -> None:
        # Counted per callback too: headers that complete within one read are bounded exactly.
        self._header_bytes += size
        if self._header_bytes > self.limits.max_header_bytes:
            self._refuse(431, "Request header fields too large.")

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(
                self.limits.header_timeout_s, self._headers_timed_out
            )

    def _disarm_header_deadline(self) -> None:
        deadline, self._header_deadline = self._header_deadline, None
        if deadline is not None:
            deadline.cancel()

    def _headers_timed_out(self) -> None:
        self._header_deadline = None
        self._refuse(408, "Request headers not received in time.")

    def _refuse(self, status: int, message: str) -> None:
        if self._refused or self.transport.is_closing():
            return
        self._refused = True
        self._disarm_header_deadline()
        responding = self.cycle is not None and not self.cycle.response_complete
        if not responding:
            # The previous response (if any) is complete: the wire is ours to answer on.
            body = message.encode("ascii")
            self.transport.write(
                b"".join(
                    [
                        STATUS_LINE[status],
                        b"content-type: text/plain; charset=utf-8\r\n",
                        b"content-length: %d\r\n" % len(body),
                        b"connection: close\r\n\r\n",
                        body,
                    ]
                )
            )
        self.transport.close()


# File descriptors a service needs besides its HTTP connections: Kafka clients, the store, logs.
_OTHER_FILES = 256


def fit_open_files(limit_concurrency: int) -> None:
    """Raise the soft open-files limit to fit `limit_concurrency` connections, up to the hard limit
    (a common soft default is 1,024: past it accept() fails and uvicorn logs errors instead of
    answering 503); a warning when the hard limit is too low to fit them."""
    needed = limit_concurrency + _OTHER_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        logging.getLogger("inferq.serving").warning(
            "open files limited to %d: fewer than INFERQ_HTTP_LIMIT_CONCURRENCY (%d) connections can be "
            "accepted; raise the hard limit (ulimit -Hn) or lower it",
            target,
            limit_concurrency,
        )


def guarded_http_protocol(limits: HttpLimits) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol bound to `limits` (a class, as uvicorn's `http=` takes)."""
    protocol: type[asyncio.Protocol] = type("GuardedHttpTools", (_GuardedHttpTools,), {"limits": limits})
    return protocol


def uvicorn_config(app: ASGIApp, host: str, port: int, *, limits: HttpLimits | None = None) -> uvicorn.Config:
    """uvicorn's configuration for a service: `limits` (default: `HttpLimits` from the environment)."""
    limits = limits if limits is not None else HttpLimits()
    fit_open_files(limits.limit_concurrency)
    options: dict[str, Any] = {
        "limit_concurrency": limits.limit_concurrency,
        "backlog": limits.backlog,
        "timeout_keep_alive": limits.timeout_keep_alive_s,
        # h11's bound of the request line and headers, should h11 ever serve (httptools is guarded).
        "h11_max_incomplete_event_size": limits.max_header_bytes,
        "timeout_graceful_shutdown": limits.graceful_shutdown_s,
    }
    # uvicorn installs SIGTERM/SIGINT handlers that end serving and run the app's lifespan shutdown.
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        # None: uvicorn's loggers go through ours (configure_logging), in the format chosen there;
        # its own configuration would print its lines in its own format beside our JSON.
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=guarded_http_protocol(limits),
        **options,
    )


@dataclass(frozen=True)
class SideListener:
    """A second app a service serves on a port of its own beside its API (its /metrics), started
    and stopped with it."""

    app: ASGIApp
    host: str
    port: int
    name: str


class ServiceServer(uvicorn.Server):
    """uvicorn for a service process: SIGTERM/SIGINT end serving, the lifespan shuts down, exit 0.

    uvicorn re-raises a captured signal after its graceful shutdown, so the process would die by the
    signal (exit -15) even after a clean stop; a supervisor must see 0 for a clean stop. Side
    listeners (bound sockets, `run_asgi`) serve while the API does and stop after it.
    """

    def __init__(
        self, config: uvicorn.Config, side: Sequence[tuple[uvicorn.Config, socket.socket]] = ()
    ) -> None:
        super().__init__(config)
        self._side = [(EmbeddedServer(c), sock) for c, sock in side]

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        side = [asyncio.create_task(server.serve([sock])) for server, sock in self._side]
        try:
            await super().serve(sockets)
        finally:
            for server, _ in self._side:
                server.should_exit = True
            if side:
                await asyncio.wait(side, timeout=SIDE_STOP_S)
        if self.started:
            # Stopped cleanly: what follows is the event loop's and the interpreter's own exit.
            bound_exit(0)


def run_asgi(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    limits: HttpLimits | None = None,
    side: Sequence[SideListener] = (),
) -> int:
    """Serve until SIGTERM/SIGINT; 0 on a clean stop, 1 when start-up failed. The `side` listeners'
    ports are bound first, so one already in use fails the start before the service starts."""
    limits = limits if limits is not None else HttpLimits()
    bound: list[tuple[uvicorn.Config, socket.socket]] = []
    for listener in side:
        try:
            sock = _bind(listener.host, listener.port, limits.backlog)
        except OSError as exc:
            log.error(  # noqa: TRY400 - the reason ("Address already in use") is the message
                "cannot listen for %s on %s port %d: %s", listener.name, listener.host, listener.port, exc
            )
            for _, taken in bound:
                taken.close()
            return 1
        log.info("%s on %s port %d", listener.name, listener.host, sock.getsockname()[1])
        bound.append((uvicorn_config(listener.app, listener.host, listener.port, limits=limits), sock))
    server = ServiceServer(uvicorn_config(app, host, port, limits=limits), bound)
    server.run()
    return 0 if server.started else 1


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=backlog)


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server run inside another component's event loop: it leaves signals to its host."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def bound_exit(code: int, grace_s: float = EXIT_GRACE_S) -> threading.Timer:
    """End the process with `code` if it has not exited `grace_s` from now."""

    def expire() -> None:
        mine = (threading.current_thread(), threading.main_thread())
        held = sorted(t.name for t in threading.enumerate() if t not in mine)
        logging.getLogger("inferq.exit").warning(
            "still exiting %.1f s after a clean stop, held by threads %s; their stacks follow, then exit %d",
            grace_s,
            ", ".join(held) or "(none)",
            code,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(grace_s, expire)
    timer.name = "inferq-exit-bound"
    timer.daemon = True
    timer.start()
    return timer
