"""The dispatcher as a process: topics checked, metrics and ``/healthz`` served, SIGTERM handled.

Signals only ask the run loop to stop; the shutdown itself happens in `RunLoop.run`.
"""

from __future__ import annotations

import asyncio
import signal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inferq.dispatcher.bootstrap import Dispatcher, bootstrap
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.admin import require_topics
from inferq.serving import EmbeddedServer, uvicorn_config
from inferq.telemetry import metrics_endpoint, setup_metrics
from inferq.tracing import setup_tracing

METRICS_STOP_S = 5.0


def metrics_app(dispatcher: Dispatcher) -> Starlette:
    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok", **dispatcher.health()})

    return Starlette(routes=[Route("/metrics", metrics_endpoint), Route("/healthz", healthz)])


async def serve(settings: DispatcherSettings) -> int:
    """Run one dispatcher until SIGTERM or SIGINT; 0 after a clean shutdown."""
    await asyncio.to_thread(require_topics, settings.kafka, settings.kafka.topics.all_requests)
    setup_metrics("inferq-dispatcher")
    setup_tracing("inferq-dispatcher", consumer_group=settings.group_id)
    dispatcher = bootstrap(settings, sighup=True)
    # The dispatcher owns the signals; the metrics server just stops when told.
    metrics_server = EmbeddedServer(
        uvicorn_config(metrics_app(dispatcher), settings.metrics_host, settings.metrics_port)
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, dispatcher.request_stop)
    metrics_task = asyncio.create_task(metrics_server.serve(), name="metrics")
    try:
        await dispatcher.run()
    finally:
        metrics_server.should_exit = True
        await asyncio.wait({metrics_task}, timeout=METRICS_STOP_S)
    return 0
