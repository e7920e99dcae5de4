"""Composition root of the dispatcher: builds its parts from settings and runs until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.dispatcher.adaptive import AdaptiveBudget, AdaptivePolicy
from services.dispatcher.backend import ChatBackend
from services.dispatcher.consumer import TierConsumer
from services.dispatcher.metrics import DispatcherMetrics
from services.dispatcher.policies import build_scheduler
from services.dispatcher.runner import Dispatcher
from services.dispatcher.settings import DispatcherSettings, build_schedule
from services.dispatcher.tokens import LocalTokenPool, TokenPool
from services.messaging.admin import require_topics
from services.messaging.producer import AsyncProducer
from services.serving import EmbeddedServer, uvicorn_config
from services.telemetry import metrics_endpoint, setup_metrics

log = logging.getLogger("inferq.dispatcher")


def build_pool(settings: DispatcherSettings) -> tuple[TokenPool, bool]:
    """The token pool and whether it is shared with other dispatchers."""
    if settings.coordination == "local":
        return LocalTokenPool(), False
    from services.dispatcher.group import GroupSizeProbe
    from services.dispatcher.tokens.redis_pool import RedisTokenPool

    probe = GroupSizeProbe(settings.kafka, settings.group_id)
    probe.start()
    pool = RedisTokenPool(
        url=settings.redis_url,
        owner=settings.dispatcher_id,
        key_prefix=f"{settings.kafka.topic_prefix}:budget",
        lease_ttl_s=settings.lease_ttl_s,
        group_size=probe.size,
    )
    return pool, True


def bootstrap(settings: DispatcherSettings) -> Dispatcher:
    setup_metrics("inferq-dispatcher")
    schedule = build_schedule(settings)
    pool, shared = build_pool(settings)
    adaptive = None
    if settings.adaptive and settings.policy == "inferq":
        policy = AdaptivePolicy(
            max_budget=settings.budget,
            min_budget=min(settings.adaptive_min_budget, settings.budget),
            window_s=settings.adaptive_window_s,
        )
        adaptive = AdaptiveBudget(policy, time.monotonic)
    api_key = settings.backend_api_key.get_secret_value() if settings.backend_api_key else None
    metrics = DispatcherMetrics(
        tokens_in_use=pool.in_use,
        tokens_held=pool.held_locally,
        effective_budget=lambda: adaptive.effective if adaptive is not None else settings.budget,
    )
    return Dispatcher(
        settings,
        consumer=TierConsumer(settings.kafka, settings.group_id, client_id=settings.dispatcher_id),
        producer=AsyncProducer(
            settings.kafka.producer_config(client_id=f"inferq-dispatcher-{settings.dispatcher_id}")
        ),
        backend=ChatBackend(settings.backend_url, api_key=api_key, max_connections=settings.budget),
        scheduler=build_scheduler(settings.policy, schedule),
        pool=pool,
        pool_is_shared=shared,
        adaptive=adaptive,
        metrics=metrics,
    )


def _metrics_app(dispatcher: Dispatcher) -> Starlette:
    async def healthz(_: Request) -> Response:
        # "assigned" > 0 means this member joined the group and will consume.
        return JSONResponse({"status": "ok", **dispatcher.health()})

    return Starlette(routes=[Route("/metrics", metrics_endpoint), Route("/healthz", healthz)])


async def serve(settings: DispatcherSettings) -> int:
    await asyncio.to_thread(require_topics, settings.kafka, settings.kafka.topics.all_requests)
    dispatcher = bootstrap(settings)
    config = uvicorn_config(_metrics_app(dispatcher), settings.metrics_host, settings.metrics_port)
    # The dispatcher owns the signals; the metrics server just stops when told.
    metrics_server = EmbeddedServer(config)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, dispatcher.request_stop)
    metrics_task = asyncio.create_task(metrics_server.serve(), name="metrics")
    try:
        await dispatcher.run()
    finally:
        metrics_server.should_exit = True
        await asyncio.wait({metrics_task}, timeout=5.0)
    return 0
