"""The results service's composition root: ``GET /v1/requests/{id}``, ``GET /healthz`` (liveness),
``GET /readyz`` (readiness: Kafka answers, the reply topics exist, the reply topic read up to now),
``GET /metrics``.

The parts, each in its own module: `store.ResultStore` (SQLite behind one worker thread; the table
itself in `table`), `consumer.ResultConsumer` (the process's one reader of the reply topic: every
partition → store, with no group, every replica holding every result and resuming from its own
stored positions, `feed`; it wakes the waiting callers with the results it stored and the chunks
written since it started), `routes.ResultRoutes` (the HTTP answers, `view.public_view` their body;
who is calling from `inferq.tenancy`; long polls and event streams wait in a `inferq.delivery`
hub), `retention.RetentionTask` (expired results deleted every `purge_interval_s`),
`webhooks.ResultWebhooks` (a result's `callback_url` POSTed, signed, from an outbox the store
writes with the result, by the replica the results group assigns its partition: `ownership`).
`create_app` builds them from the settings (and reads the tenants file: a bad one stops the service
before anything starts); its lifespan checks the topics, opens the store, then starts the webhook
sender, the consumer, the retention task and the tenants' reloader, and stops them
in the reverse order, so the last batch is written before the database closes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Route

from inferq.delivery.hub import WaiterHub
from inferq.delivery.metrics import DeliveryMetrics
from inferq.messaging.admin import require_topics
from inferq.messaging.codec import result_codec
from inferq.messaging.readiness import ReadinessSettings, TopicsWatch, readiness_endpoint
from inferq.results.consumer import ResultConsumer, ResultFeed, ResultsMetrics
from inferq.results.feed import KafkaResultFeed
from inferq.results.retention import RetentionTask
from inferq.results.routes import Health, ReadMetrics, ResultRoutes, WaitLimits
from inferq.results.settings import ResultsSettings
from inferq.results.store import ResultStore
from inferq.results.webhooks import ResultWebhooks, StoppableProducer
from inferq.telemetry import meter, metrics_endpoint
from inferq.tenancy.registry import TenantRegistry

log = logging.getLogger("inferq.results")


@asynccontextmanager
async def serve_parts(
    settings: ResultsSettings,
    store: ResultStore,
    consumer: ResultConsumer,
    retention: RetentionTask,
    tenants: TenantRegistry,
    *,
    check_topics: bool = True,
    reload_on_sighup: bool = False,
    webhooks: ResultWebhooks | None = None,
    readiness: TopicsWatch | None = None,
) -> AsyncIterator[None]:
    """Open the store, then start the webhook sender, the consumer, the retention task and the
    tenants' reloader (with `reload_on_sighup`, SIGHUP reloads too); on exit (or a failed start)
    stop in the reverse order."""
    async with AsyncExitStack() as started:
        if check_topics:
            # One metadata read for every topic the service needs (`MissingTopicsError` names each).
            needed = settings.reply_topics + (webhooks.topics if webhooks is not None else [])
            await asyncio.to_thread(require_topics, settings.kafka, needed)
            if readiness is not None:
                readiness.passed()
        await store.open()
        started.push_async_callback(store.close)
        if webhooks is not None:
            await webhooks.start(store)
            started.push_async_callback(webhooks.stop)
        await consumer.start()
        started.push_async_callback(consumer.stop)
        await retention.start()
        started.push_async_callback(retention.stop)
        await tenants.start(sighup=reload_on_sighup)
        started.push_async_callback(tenants.stop)
        if readiness is not None:
            await readiness.start()
            started.push_async_callback(readiness.stop)
        log.info(
            "results ready, consuming %s into %s; kept %g s, at most %d; %s",
            settings.kafka.topics.results_pattern
            if settings.all_regions
            else ", ".join(settings.reply_topics),
            store.path,
            settings.retention_s,
            settings.max_results,
            "OPEN MODE (no keys)" if tenants.open_mode else f"tenants from {tenants.path}",
        )
        yield


def service_health(
    consumer: ResultConsumer,
    retention: RetentionTask,
    webhooks: ResultWebhooks | None = None,
) -> Health:
    """Unhealthy once the consumer (results stop arriving, waiting callers are no longer woken),
    the retention task (the disk fills) or the webhook sender has stopped; "starting" until the
    consumer has caught up with the reply topic."""
    if consumer.failed:
        return Health("consumer stopped", healthy=False)
    if retention.failed:
        return Health("retention stopped", healthy=False)
    if webhooks is not None and webhooks.failed:
        return Health("webhook sender or its partition ownership stopped", healthy=False)
    return Health("ok" if consumer.ready.is_set() else "starting")


def ready_problems(health: Health, consumer: ResultConsumer, readiness: TopicsWatch | None) -> list[str]:
    """Why results should not answer reads now (empty: it should). A replica answers once its
    reader has stored everything written to the reply topic before it started (every replica holds
    every result), so a load balancer never sends it a read it would answer 404."""
    if not health.healthy:
        return [health.status]
    reasons = [] if consumer.ready.is_set() else ["not caught up with the reply topic yet"]
    kafka = readiness.problem() if readiness is not None else None
    if kafka is not None:
        reasons.append(kafka)
    return reasons


def create_app(
    settings: ResultsSettings,
    *,
    check_topics: bool = True,
    feed: Callable[[], ResultFeed] | None = None,
    hub: WaiterHub | None = None,
    reload_on_sighup: bool = False,
    dead_letter_producer: StoppableProducer | None = None,
) -> Starlette:
    """The results ASGI app. `feed` makes the reply topic's one reader (tests inject a fake); by
    default a `KafkaResultFeed` (every partition, from the store's positions), built when the
    lifespan starts. `hub` may be injected (tests count its waiters). The tenants file is read now
    (`TenantsFileError`); `reload_on_sighup` (the command sets it) installs the SIGHUP handler.
    With ``INFERQ_WEBHOOK_ENABLED`` (the default) webhooks are delivered; their dead letters go
    through `dead_letter_producer` (default: a librdkafka producer, started on first use). The
    replica sends the webhooks of the partitions the results group assigns it, unless `feed` is
    injected (a test with no broker: it sends them all)."""
    tenants = TenantRegistry(
        settings.tenants.file,
        topics=settings.kafka.topics,
        reload_interval_s=settings.tenants.reload_interval_s,
    )
    tenants.load()
    webhooks = (
        ResultWebhooks(settings, tenants, producer=dead_letter_producer, replicated=feed is None)
        if settings.webhooks.enabled
        else None
    )
    store = ResultStore(
        settings.db_path,
        retention_s=settings.retention_s,
        max_results=settings.max_results,
        hooks=[webhooks.outbox] if webhooks is not None else [],
    )
    hub = hub or WaiterHub(max_waiters=settings.max_waiters)
    consumer = ResultConsumer(
        feed or functools.partial(KafkaResultFeed, settings, store.positions),
        store,
        result_codec(),
        ResultsMetrics(meter("inferq.results")),
        hub=hub,
    )
    retention = RetentionTask(store, interval_s=settings.purge_interval_s)
    ready = ReadinessSettings()
    # Re-runs the start-up check for /readyz; none with an injected feed (no Kafka in those tests).
    readiness = (
        TopicsWatch(
            functools.partial(
                require_topics,
                settings.kafka,
                settings.reply_topics + (webhooks.topics if webhooks is not None else []),
                timeout_s=ready.check_timeout_s,
            ),
            interval_s=ready.check_interval_s,
        )
        if feed is None
        else None
    )

    def health() -> Health:
        return service_health(consumer, retention, webhooks)

    routes = ResultRoutes(
        store,
        health=health,
        tenants=tenants,
        metrics=ReadMetrics(meter("inferq.results")),
        hub=hub,
        delivery=DeliveryMetrics(meter("inferq.results"), hub, service="results"),
        limits=WaitLimits(
            max_wait_s=settings.max_wait_s,
            events_max_s=settings.events_max_s,
            keepalive_s=settings.events_keepalive_s,
        ),
    )
    return Starlette(
        routes=[
            Route("/v1/requests/{request_id}", routes.get_result, methods=["GET"]),
            Route("/v1/requests/{request_id}/events", routes.events, methods=["GET"]),
            Route("/healthz", routes.healthz, methods=["GET"]),
            Route(
                "/readyz",
                readiness_endpoint(lambda: ready_problems(health(), consumer, readiness)),
                methods=["GET"],
            ),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        lifespan=lambda _: serve_parts(
            settings,
            store,
            consumer,
            retention,
            tenants,
            check_topics=check_topics,
            reload_on_sighup=reload_on_sighup,
            webhooks=webhooks,
            readiness=readiness,
        ),
    )
