"""The results service's composition root: ``GET /v1/requests/{id}``, ``GET /healthz`` (liveness),
``GET /readyz`` (readiness: Kafka answers, the reply topics exist, the reply topic read up to now);
``GET /metrics`` is on a port of its own (`inferq.results.cli`: it names the tenants).

The parts, each in its own module: `store.ResultStore` (SQLite behind one worker thread; the table
itself in `table`), `consumer.ResultConsumer` (the process's one reader of the reply topic: every
partition → store, with no group, every replica holding every result and resuming from its own
stored positions, `feed`; it wakes the waiting callers with the results it stored),
`chunk_reader.ChunkReader` (the chunk topics, `chunk_feed`, read only while an event stream wants
chunks), `routes.ResultRoutes` (the HTTP answers, `view.public_view` their body;
who is calling from `inferq.tenancy`; long polls and event streams wait in a `inferq.delivery`
hub), `retention.RetentionTask` (expired results deleted every `purge_interval_s`),
`inferq.tenancy.holds.HeldResources` (what each tenant holds: its requests in progress, counted by
`inferq.tenancy.held_connections.HeldConnections` around the routes, its long polls and event
streams, taken by the routes; its reads per minute are `inferq.tenancy.rate`'s),
`webhooks.ResultWebhooks` (a result's `callback_url` POSTed, signed, from an outbox the store
writes with the result, by the replica the results group assigns its partition: `ownership`).
`bootstrap` builds them from the settings (and reads the tenants file: a bad one stops the service
before anything starts); `create_app` serves them: its lifespan (`serve_parts`) checks the topics,
opens the store, then starts the webhook sender, the consumer, the chunk reader, the retention task
and the tenants' reloader, and stops them in the reverse order, so the last batch is written before
the database closes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from inferq.delivery.hub import WaiterHub
from inferq.delivery.metrics import DeliveryMetrics
from inferq.messaging.admin import require_topics
from inferq.messaging.codec import result_codec
from inferq.messaging.producer import AsyncProducer
from inferq.messaging.readiness import ReadinessSettings, TopicsWatch, readiness_endpoint
from inferq.results.chunk_feed import kafka_chunk_feed
from inferq.results.chunk_reader import ChunkFeed, ChunkReader, watch_chunk_reader
from inferq.results.consumer import ResultConsumer, ResultFeed, ResultsMetrics
from inferq.results.feed import KafkaResultFeed
from inferq.results.retention import RetentionTask
from inferq.results.routes import Health, ReadMetrics, ResultRoutes, WaitLimits
from inferq.results.settings import ResultsSettings
from inferq.results.store import ResultStore
from inferq.results.webhooks import ResultWebhooks, StoppableProducer, result_body
from inferq.telemetry import meter
from inferq.tenancy.held_connections import HeldConnections
from inferq.tenancy.holds import HeldResources
from inferq.tenancy.metrics import watch_holds, watch_reloads
from inferq.tenancy.rate import RateLimiter
from inferq.tenancy.registry import TenantRegistry
from inferq.webhooks.outbox import WebhookOutbox
from inferq.webhooks.sender import limits_of

log = logging.getLogger("inferq.results")


@dataclass(frozen=True)
class ResultsParts:
    """Everything one results process runs; what `serve_parts` starts and stops."""

    settings: ResultsSettings
    tenants: TenantRegistry
    store: ResultStore
    consumer: ResultConsumer
    # None when the reply topics' feed is injected without a chunk feed (no Kafka).
    chunks: ChunkReader | None
    retention: RetentionTask
    # None with ``INFERQ_WEBHOOK_ENABLED=false``.
    webhooks: ResultWebhooks | None
    # The start-up topic check, re-run in the background for ``/readyz``; none with no Kafka.
    readiness: TopicsWatch | None
    routes: ResultRoutes
    # What each tenant holds now (connections, long polls, event streams).
    holds: HeldResources

    def health(self) -> Health:
        return service_health(self.consumer, self.retention, self.webhooks, self.chunks)

    def ready_problems(self) -> list[str]:
        return ready_problems(self.health(), self.consumer, self.readiness)


def bootstrap(
    settings: ResultsSettings,
    *,
    feed: Callable[[], ResultFeed] | None = None,
    chunk_feed: Callable[[int], ChunkFeed] | None = None,
    hub: WaiterHub | None = None,
    dead_letter_producer: StoppableProducer | None = None,
    rate_clock_s: Callable[[], float] = time.monotonic,
) -> ResultsParts:
    """Build every part of results from `settings`; the keyword arguments replace an edge. `feed`
    makes the reply topic's one reader (default: a `KafkaResultFeed`, every partition from the
    store's positions, built when the lifespan starts); an injected `feed` means no Kafka: no
    readiness watch, and the replica sends every webhook (no results group). `chunk_feed` makes the
    chunk topics' reader from a time in ms (default: `chunk_feed.kafka_chunk_feed`; none with an injected
    `feed`: no chunk reader, event streams get results only). `hub` may be injected
    (tests count its waiters); `rate_clock_s` is the reads' rate limiter's clock (monotonic
    seconds). The tenants file is read now (`TenantsFileError`). With
    ``INFERQ_WEBHOOK_ENABLED`` (the default) webhooks are delivered; their dead letters go through
    `dead_letter_producer` (default: a librdkafka producer, started on first use)."""
    on_kafka = feed is None
    tenants = TenantRegistry.loaded(settings.tenants, settings.kafka.topics)
    watch_reloads(meter("inferq.results"), tenants)
    holds = HeldResources()
    watch_holds(meter("inferq.results"), holds, tenants)
    reads = RateLimiter.reads(rate_clock_s)
    # The buckets follow the file: sized at start, re-sized at every reload (none in open mode).
    tenants.on_change(reads.configure)
    # Built before the store, which writes a result's delivery in the same transaction as the result.
    outbox = webhook_outbox(tenants) if settings.webhooks.enabled else None
    store = result_store(settings, outbox)
    webhooks = result_webhooks(settings, tenants, store, outbox, dead_letter_producer, replicated=on_kafka)
    hub = hub or WaiterHub(max_waiters=settings.max_waiters)
    feed = feed or functools.partial(KafkaResultFeed, settings, store.positions)
    consumer = ResultConsumer(feed, store, result_codec(), ResultsMetrics(meter("inferq.results")), hub=hub)
    if chunk_feed is None and on_kafka:
        chunk_feed = functools.partial(kafka_chunk_feed, settings)
    chunks = chunk_reader(settings, hub, chunk_feed)
    retention = RetentionTask(store, interval_s=settings.purge_interval_s)
    health = functools.partial(service_health, consumer, retention, webhooks, chunks)
    return ResultsParts(
        settings=settings,
        tenants=tenants,
        store=store,
        consumer=consumer,
        chunks=chunks,
        retention=retention,
        webhooks=webhooks,
        readiness=topics_watch(settings, webhooks) if on_kafka else None,
        routes=result_routes(settings, store, health, tenants, hub, holds, reads),
        holds=holds,
    )


# The builders `bootstrap` lists, in the order it calls them.


def webhook_outbox(tenants: TenantRegistry) -> WebhookOutbox:
    """The outbox, each tenant's deliveries owed bounded by its `webhooks_queued`."""
    return WebhookOutbox(result_body, queue_limit=lambda name: limits_of(tenants, name).webhooks_queued)


def result_store(settings: ResultsSettings, outbox: WebhookOutbox | None) -> ResultStore:
    return ResultStore(
        settings.db_path,
        retention_s=settings.retention_s,
        max_results=settings.max_results,
        hooks=[outbox] if outbox is not None else [],
    )


def result_webhooks(
    settings: ResultsSettings,
    tenants: TenantRegistry,
    store: ResultStore,
    outbox: WebhookOutbox | None,
    producer: StoppableProducer | None,
    *,
    replicated: bool,
) -> ResultWebhooks | None:
    """The webhook sender of the store's outbox (none when webhooks are off: no outbox)."""
    if outbox is None:
        return None
    producer = producer or AsyncProducer(settings.kafka.producer_config(client_id="inferq-results"))
    return ResultWebhooks(settings, tenants, store, outbox, producer=producer, replicated=replicated)


def chunk_reader(
    settings: ResultsSettings, hub: WaiterHub, feed: Callable[[int], ChunkFeed] | None
) -> ChunkReader | None:
    """The chunk reader of `feed` (none without one), reporting on the service's meter."""
    if feed is None:
        return None
    reader = ChunkReader(feed, hub, replay_s=settings.chunk_replay_s, grace_s=settings.chunk_reader_grace_s)
    watch_chunk_reader(meter("inferq.results"), reader)
    return reader


def needed_topics(settings: ResultsSettings, webhooks: ResultWebhooks | None) -> list[str]:
    """Every topic the service needs: the reply topics, and the webhooks' dead-letter topic."""
    return settings.reply_topics + (webhooks.topics if webhooks is not None else [])


def topics_watch(settings: ResultsSettings, webhooks: ResultWebhooks | None) -> TopicsWatch:
    ready = ReadinessSettings()
    return TopicsWatch(
        functools.partial(
            require_topics, settings.kafka, needed_topics(settings, webhooks), timeout_s=ready.check_timeout_s
        ),
        interval_s=ready.check_interval_s,
    )


def result_routes(
    settings: ResultsSettings,
    store: ResultStore,
    health: Callable[[], Health],
    tenants: TenantRegistry,
    hub: WaiterHub,
    holds: HeldResources,
    reads: RateLimiter,
) -> ResultRoutes:
    return ResultRoutes(
        store,
        health=health,
        tenants=tenants,
        metrics=ReadMetrics(meter("inferq.results")),
        hub=hub,
        delivery=DeliveryMetrics(meter("inferq.results"), hub, service="results"),
        holds=holds,
        reads=reads,
        limits=WaitLimits(
            max_wait_s=settings.max_wait_s,
            events_max_s=settings.events_max_s,
            keepalive_s=settings.events_keepalive_s,
        ),
    )


@asynccontextmanager
async def serve_parts(
    parts: ResultsParts, *, check_topics: bool = True, reload_on_sighup: bool = False
) -> AsyncIterator[None]:
    """Open the store, then start the webhook sender, the consumer, the chunk reader (which reads
    only while an event stream wants chunks), the retention task and the tenants' reloader (with
    `reload_on_sighup`, SIGHUP reloads too); on exit (or a failed start) stop in the reverse order."""
    settings, store, tenants, webhooks, readiness = (
        parts.settings,
        parts.store,
        parts.tenants,
        parts.webhooks,
        parts.readiness,
    )
    async with AsyncExitStack() as started:
        if check_topics:
            # One metadata read for every topic the service needs (`MissingTopicsError` names each).
            await asyncio.to_thread(require_topics, settings.kafka, needed_topics(settings, webhooks))
            if readiness is not None:
                readiness.passed()
        await store.open()
        started.push_async_callback(store.close)
        if webhooks is not None:
            await webhooks.start()
            started.push_async_callback(webhooks.stop)
        await parts.consumer.start()
        started.push_async_callback(parts.consumer.stop)
        if parts.chunks is not None:
            await parts.chunks.start()
            started.push_async_callback(parts.chunks.stop)
        await parts.retention.start()
        started.push_async_callback(parts.retention.stop)
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
    webhooks: ResultWebhooks | None,
    chunks: ChunkReader | None = None,
) -> Health:
    """Unhealthy once the consumer (results stop arriving, waiting callers are no longer woken),
    the chunk reader (event streams get no chunks), the retention task (the disk fills) or the
    webhook sender has stopped; "starting" until the consumer has caught up with the reply topic."""
    if consumer.failed:
        return Health("consumer stopped", healthy=False)
    if chunks is not None and chunks.failed:
        return Health("chunk reader stopped", healthy=False)
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
    chunk_feed: Callable[[int], ChunkFeed] | None = None,
    hub: WaiterHub | None = None,
    reload_on_sighup: bool = False,
    dead_letter_producer: StoppableProducer | None = None,
    rate_clock_s: Callable[[], float] = time.monotonic,
) -> Starlette:
    """The results ASGI app of `bootstrap`'s parts; its lifespan runs `serve_parts`. See
    `bootstrap` for the injections; `reload_on_sighup` (the command sets it) installs the SIGHUP
    handler."""
    parts = bootstrap(
        settings,
        feed=feed,
        chunk_feed=chunk_feed,
        hub=hub,
        dead_letter_producer=dead_letter_producer,
        rate_clock_s=rate_clock_s,
    )
    return asgi_app(parts, check_topics=check_topics, reload_on_sighup=reload_on_sighup)


def asgi_app(parts: ResultsParts, *, check_topics: bool, reload_on_sighup: bool) -> Starlette:
    """The routes over `parts`, each tenant's requests in progress bounded (`HeldConnections`); the
    lifespan serves them (`serve_parts`)."""
    routes = parts.routes
    held = Middleware(HeldConnections, registry=parts.tenants, holds=parts.holds)
    return Starlette(
        routes=[
            Route("/v1/requests/{request_id}", routes.get_result, methods=["GET"]),
            Route("/v1/requests/{request_id}/events", routes.events, methods=["GET"]),
            Route("/healthz", routes.healthz, methods=["GET"]),
            Route("/readyz", readiness_endpoint(parts.ready_problems), methods=["GET"]),
        ],
        middleware=[held],
        lifespan=lambda _: serve_parts(parts, check_topics=check_topics, reload_on_sighup=reload_on_sighup),
    )
