"""The dispatcher as a process: topics checked, metrics, ``/healthz`` (liveness) and ``/readyz``
(readiness: in the group, Kafka answers, the topics exist) served, SIGTERM handled.

Signals only ask the run loop to stop; the shutdown itself happens in `RunLoop.run`.
"""

from __future__ import annotations

import asyncio
import functools
import signal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inferq.dispatcher.bootstrap import Dispatcher, bootstrap
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.admin import require_topics
from inferq.messaging.readiness import ReadinessSettings, TopicsWatch, readiness_endpoint
from inferq.serving import EmbeddedServer, bound_exit, uvicorn_config
from inferq.telemetry import metrics_endpoint, setup_metrics
from inferq.tracing import setup_tracing

METRICS_STOP_S = 5.0


def metrics_app(dispatcher: Dispatcher, kafka: TopicsWatch | None = None) -> Starlette:
    """``/metrics``, ``/healthz`` (200 while the process runs, with its state) and ``/readyz``
    (the dispatcher's own reasons, then `kafka`'s last check)."""

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok", **dispatcher.health()})

    def problems() -> list[str]:
        kafka_problem = kafka.problem() if kafka is not None else None
        return dispatcher.ready_problems() + ([kafka_problem] if kafka_problem is not None else [])

    return Starlette(
        routes=[
            Route("/metrics", metrics_endpoint),
            Route("/healthz", healthz),
            Route("/readyz", readiness_endpoint(problems)),
        ]
    )


async def serve(settings: DispatcherSettings) -> int:
    """Run one dispatcher until SIGTERM or SIGINT; 0 after a clean shutdown."""
    needed = settings.kafka.topics.all_requests
    await asyncio.to_thread(require_topics, settings.kafka, needed)
    ready = ReadinessSettings()
    kafka = TopicsWatch(
        functools.partial(require_topics, settings.kafka, needed, timeout_s=ready.check_timeout_s),
        interval_s=ready.check_interval_s,
    )
    kafka.passed()
    setup_metrics("inferq-dispatcher")
    setup_tracing("inferq-dispatcher", consumer_group=settings.group_id)
    dispatcher = bootstrap(settings, sighup=True)
    # The dispatcher owns the signals; the metrics server just stops when told.
    metrics_server = EmbeddedServer(
        uvicorn_config(metrics_app(dispatcher, kafka), settings.metrics_host, settings.metrics_port)
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, dispatcher.request_stop)
    metrics_task = asyncio.create_task(metrics_server.serve(), name="metrics")
    await kafka.start()
    try:
        await dispatcher.run()
    finally:
        await kafka.stop()
        metrics_server.should_exit = True
        await asyncio.wait({metrics_task}, timeout=METRICS_STOP_S)
    # Stopped cleanly (a failure raised above): what follows is the loop's and the interpreter's exit.
    bound_exit(0)
    return 0
