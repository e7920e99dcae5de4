"""The ingest service's composition root: ``POST /v1/requests``, ``GET /v1/backlog``, ``GET /healthz``
(liveness), ``GET /readyz`` (readiness: Kafka answers and the topics exist); ``GET /metrics`` is on
a port of its own (`inferq.ingest.cli`: it names the tenants).

A request is answered 202 only after the broker acknowledged the record (acks=all), so a 202 is a
promise the pipeline keeps; the refusals are listed in `inferq.ingest.submit`. The parts, each in
its own module:

- `submit.SubmitEndpoint`: the POST handler (`body` reads within a size and a deadline, `json_guard`
  parses within bounds, `validation` checks every field, `record` makes the Avro record)
- `publisher.Publisher`: the record's size (`record_limit`), admission (`admission`), idempotency
  (`idempotency`) and the produce
- `backlog.KafkaBacklogReader`: the dispatcher group's lag, refreshed in the background
- `backlog_watch`: the 70% alarm, on every request and on a timer
- `backlog_view.BacklogEndpoint`: ``GET /v1/backlog``
- `tenants.TenantGate`: the caller's key (401), rate (429), tenant (403) and entitlements (403),
  over `inferq.tenancy` (the registry reloads the tenants file; `tenant_shares` is the per-tenant
  admission inside the publisher)
- `metrics.IngestMetrics`: the OpenTelemetry instruments
- `inferq.tenancy.holds.HeldResources`: what each tenant holds now (its requests in progress,
  counted by `inferq.tenancy.held_connections.HeldConnections` around the routes, its streamed
  chats and calls waiting for their answer, taken by the `TenantGate`), each within its limits
- `chat.endpoint.ChatCompletionsEndpoint`: ``POST /v1/chat/completions`` and ``GET /v1/models``,
  OpenAI-compatible, through the same submit path; it waits for outcomes in a `inferq.delivery`
  hub that a `ReplyFollower` of the reply topic (no group, from the end) feeds

`bootstrap` makes them from the settings (Kafka clients included: here, never at import time; the
tenants file is read here, so a bad one stops the service before anything starts) and `serve_parts`
starts them in dependency order and stops them in the reverse order.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

from opentelemetry.metrics import Meter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inferq import tracing
from inferq.clock import wall_ms
from inferq.delivery.follower import KafkaReplyFeed, ReplyFeed, ReplyFollower, followed_topics
from inferq.delivery.hub import WaiterHub
from inferq.delivery.metrics import DeliveryMetrics
from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.backlog import BacklogSource, KafkaBacklogReader
from inferq.ingest.backlog_view import BacklogEndpoint
from inferq.ingest.backlog_watch import BacklogAlarm, BacklogWatcher
from inferq.ingest.callbacks import CallbackCheck
from inferq.ingest.chat import answers
from inferq.ingest.chat.embeddings import EmbeddingLimits, EmbeddingsEndpoint
from inferq.ingest.chat.endpoint import ChatCompletionsEndpoint, ChatLimits
from inferq.ingest.chat.held_calls import HeldCalls
from inferq.ingest.errors import HeldLimitError
from inferq.ingest.idempotency import IdempotencyCache
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.metrics import IngestMetrics
from inferq.ingest.publisher import Publisher
from inferq.ingest.record import RecordRules
from inferq.ingest.record_limit import (
    RecordLimit,
    producer_max_message_bytes,
    read_topics_max_message_bytes,
)
from inferq.ingest.settings import IngestSettings
from inferq.ingest.submit import SubmitEndpoint, refusal_response
from inferq.ingest.tenant_shares import BacklogShares
from inferq.ingest.tenants import TenantGate
from inferq.messaging.admin import require_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.producer import AsyncProducer
from inferq.messaging.readiness import ReadinessSettings, TopicsWatch, readiness_endpoint
from inferq.messaging.tiers import TierPolicy
from inferq.telemetry import meter
from inferq.tenancy.held_connections import HeldConnections
from inferq.tenancy.holds import HeldResources, HoldRefusal
from inferq.tenancy.metrics import watch_holds, watch_reloads
from inferq.tenancy.rate import RateLimiter
from inferq.tenancy.registry import TenantRegistry
from inferq.tracing import TracedProducer
from inferq.webhooks.guard import AddressGuard
from inferq.webhooks.metrics import WebhookRefusals
from inferq.webhooks.policy import CallbackPolicy
from inferq.webhooks.resolver import CallbackResolver

log = logging.getLogger("inferq.ingest")

# Bound of the shutdown flush: records handed to librdkafka get this long to be acknowledged.
_FLUSH_TIMEOUT_S = 10.0
# How long a start waits for the reply topic's follower before serving without it.
_FOLLOW_READY_WAIT_S = 15.0
# librdkafka enforces the produce timeout (message.timeout.ms); the await adds this backstop to it.
_ACK_BACKSTOP_S = 1.0


@dataclass(frozen=True)
class IngestParts:
    """Everything one ingest process runs; what `serve_parts` starts and stops."""

    settings: IngestSettings
    producer: AsyncProducer
    backlogs: BacklogSource
    admission: AdmissionPolicy
    watcher: BacklogWatcher
    submit: SubmitEndpoint
    backlog_view: BacklogEndpoint
    record_limit: RecordLimit
    tenants: TenantRegistry
    chat: ChatCompletionsEndpoint
    embeddings: EmbeddingsEndpoint
    # None when no reply topic is followed (tests with an injected producer): completions then wait
    # for nothing and end at their bound.
    follower: ReplyFollower | None
    # The start-up topic check, re-run in the background for ``/readyz``.
    readiness: TopicsWatch
    # What each tenant holds now (connections, streamed chats, calls waiting for their answer).
    holds: HeldResources
    # Callback host lookups' own threads (`inferq.webhooks.resolver`), closed on the way out.
    callback_resolver: CallbackResolver

    def ready_problems(self) -> list[str]:
        """Why ingest should not take requests now (empty: it should): Kafka or the topics, as of
        the last background check."""
        problem = self.readiness.problem()
        return [] if problem is None else [problem]


def bootstrap(
    settings: IngestSettings,
    *,
    producer: AsyncProducer | None = None,
    clock_ms: Callable[[], int] = wall_ms,
    backlog: BacklogSource | None = None,
    rate_clock_s: Callable[[], float] = time.monotonic,
    metrics_meter: Meter | None = None,
    follow_feed: Callable[[], ReplyFeed] | None = None,
    hub: WaiterHub | None = None,
    topics_check: Callable[[], None] | None = None,
) -> IngestParts:
    """Build every part of ingest from `settings`; the keyword arguments replace an edge. `producer`
    and `backlog` (the per-tier backlogs admission weighs) replace the librdkafka producer and the
    `KafkaBacklogReader` of the group `settings.dispatcher_group`. Nothing connects before
    `serve_parts` starts them. The tenants file is read now: `TenantsFileError` when it cannot be
    used. `rate_clock_s` is the tenants' rate limiter's clock (monotonic seconds); `metrics_meter`
    replaces the global meter (tests read the counters back). `follow_feed` makes the reply topic's
    follower (default: a `KafkaReplyFeed` of `settings.default_reply_topic`, or none when `producer`
    is injected); `hub` the waiters' hub (tests count its waiters). `topics_check` is what
    ``/readyz`` re-runs (default: the start-up check of the request and reply topics; none when
    `producer` is injected)."""
    on_kafka = producer is None  # an injected producer: a test with no broker behind it
    tenants = TenantRegistry.loaded(settings.tenants, settings.kafka.topics, signs_records=True)
    config = producer_config(settings)
    producer = producer or AsyncProducer(config)
    backlogs = backlog or backlog_reader(settings)
    admission = settings.admission_policy()
    alarm = BacklogAlarm(admission, settings.backlog_alert_ratio)
    metrics_meter = metrics_meter or meter("inferq.ingest")
    metrics = IngestMetrics(metrics_meter, backlogs, admission)
    watch_reloads(metrics_meter, tenants)
    holds = HeldResources()
    watch_holds(metrics_meter, holds, tenants)
    gate = tenant_gate(settings, tenants, rate_clock_s, holds)
    record_limit = record_limit_of(settings, config)
    publisher = publisher_of(settings, producer, backlogs, admission, alarm, metrics, record_limit, tenants)
    json_guard = JsonGuard(max_depth=settings.max_json_depth, max_number_chars=settings.max_json_number_chars)
    resolver = callback_resolver(settings, metrics_meter)
    submit = submit_endpoint(
        settings, json_guard, record_rules(settings, clock_ms), publisher, metrics, gate, resolver
    )
    # No history of streams: a completion's waiter exists before its request is produced.
    hub = hub or WaiterHub(max_waiters=settings.max_waiters, history_max_bytes=0)
    follower = reply_follower(settings, follow_feed, hub, on_kafka=on_kafka)
    delivery = DeliveryMetrics(metrics_meter, hub, service="ingest")
    calls = held_calls(settings, submit, hub, gate, follower, delivery, clock_ms)
    chat = chat_endpoint(settings, calls, json_guard)
    embeddings = embeddings_endpoint(settings, calls, json_guard)
    return IngestParts(
        settings=settings,
        producer=producer,
        backlogs=backlogs,
        admission=admission,
        watcher=BacklogWatcher(backlogs, alarm, interval_s=settings.backlog_refresh_s),
        submit=submit,
        backlog_view=BacklogEndpoint(backlogs, admission, caller=gate.caller),
        record_limit=record_limit,
        tenants=tenants,
        chat=chat,
        embeddings=embeddings,
        follower=follower,
        readiness=topics_watch(settings, topics_check, on_kafka=on_kafka),
        holds=holds,
        callback_resolver=resolver,
    )


# The builders `bootstrap` lists, in the order it calls them.


def producer_config(settings: IngestSettings) -> dict[str, object]:
    return settings.kafka.producer_config(client_id="inferq-ingest") | {
        # The client's patience (produce_timeout_s), not the shared 10 s: past it the record fails
        # and the client gets 503 instead of a hang.
        "message.timeout.ms": int(settings.produce_timeout_s * 1000)
    }


def backlog_reader(settings: IngestSettings) -> KafkaBacklogReader:
    return KafkaBacklogReader(
        settings.kafka,
        settings.dispatcher_group,
        refresh_interval_s=settings.backlog_refresh_s,
        timeout_s=settings.backlog_timeout_s,
    )


def tenant_gate(
    settings: IngestSettings,
    tenants: TenantRegistry,
    rate_clock_s: Callable[[], float],
    holds: HeldResources,
) -> TenantGate:
    return TenantGate(
        tenants,
        RateLimiter(rate_clock_s),
        topics=settings.kafka.topics,
        default_reply_topic=settings.default_reply_topic,
        holds=holds,
    )


def record_limit_of(settings: IngestSettings, config: dict[str, object]) -> RecordLimit:
    return RecordLimit(
        producer_max_message_bytes(config),
        topics_max_bytes=functools.partial(
            read_topics_max_message_bytes, settings.kafka, settings.kafka.topics.all_requests
        ),
        cap_bytes=settings.max_record_bytes,
    )


def publisher_of(
    settings: IngestSettings,
    producer: AsyncProducer,
    backlogs: BacklogSource,
    admission: AdmissionPolicy,
    alarm: BacklogAlarm,
    metrics: IngestMetrics,
    record_limit: RecordLimit,
    tenants: TenantRegistry,
) -> Publisher:
    return Publisher(
        producer=TracedProducer(producer) if tracing.enabled() else producer,
        topics=settings.kafka.topics,
        codec=request_codec(),
        backlogs=backlogs,
        admission=admission,
        alarm=alarm,
        recent_ids=IdempotencyCache(settings.idempotency_cache_size),
        metrics=metrics,
        ack_timeout_s=settings.produce_timeout_s + _ACK_BACKSTOP_S,
        record_limit=record_limit,
        tenants=tenants,
        shares=BacklogShares(
            admission,
            window=settings.tenant_share_window,
            from_fill=settings.tenant_share_from_fill,
            active_s=settings.tenant_share_active_s,
        ),
    )


def record_rules(settings: IngestSettings, clock_ms: Callable[[], int]) -> RecordRules:
    return RecordRules(
        policy=TierPolicy(scenario_tiers=settings.scenario_tiers),
        deadlines_ms=settings.deadlines_ms,
        topics=settings.kafka.topics,
        region=settings.origin_region,
        clock_ms=clock_ms,
        # A regional ingest's requests are answered on its region's reply topic unless they name one.
        default_reply_to=settings.default_reply_topic if settings.region else None,
    )


def callback_resolver(settings: IngestSettings, metrics_meter: Meter) -> CallbackResolver:
    """The callbacks' own resolver (never the loop's default executor); its threads start on first use."""
    return CallbackResolver(
        threads=settings.webhooks.resolver_threads, on_refused=WebhookRefusals(metrics_meter).count
    )


def submit_endpoint(
    settings: IngestSettings,
    json_guard: JsonGuard,
    rules: RecordRules,
    publisher: Publisher,
    metrics: IngestMetrics,
    gate: TenantGate,
    resolver: CallbackResolver,
) -> SubmitEndpoint:
    hooks = settings.webhooks
    guard = AddressGuard(
        allow_private=hooks.allow_private_addresses,
        resolve_timeout_s=hooks.resolve_timeout_s,
        resolve=resolver,
    )
    return SubmitEndpoint(
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        json_guard=json_guard,
        rules=rules,
        publisher=publisher,
        metrics=metrics,
        tenants=gate,
        callbacks=CallbackCheck(CallbackPolicy(hooks, guard)),
    )


def reply_follower(
    settings: IngestSettings, follow_feed: Callable[[], ReplyFeed] | None, hub: WaiterHub, *, on_kafka: bool
) -> ReplyFollower | None:
    """The reply topic's follower, feeding `hub`; none with no feed and no Kafka (completions then
    wait for nothing and end at their bound)."""
    if follow_feed is None and on_kafka:
        followed = followed_topics(settings.kafka, settings.default_reply_topic)
        follow_feed = functools.partial(KafkaReplyFeed, settings.kafka, followed, client_id="inferq-ingest")
    return ReplyFollower(follow_feed, hub) if follow_feed is not None else None


def held_calls(
    settings: IngestSettings,
    submit: SubmitEndpoint,
    hub: WaiterHub,
    gate: TenantGate,
    follower: ReplyFollower | None,
    delivery: DeliveryMetrics,
    clock_ms: Callable[[], int],
) -> HeldCalls:
    """The steps of a call its caller waits for, shared by the OpenAI endpoints."""
    return HeldCalls(
        submit,
        hub,
        gate,
        clock_ms=clock_ms,
        grace_s=settings.chat_grace_s,
        max_wait_s=settings.chat_max_wait_s,
        following=(lambda: True) if follower is None else follower.ready.is_set,
        delivery=delivery,
    )


def chat_endpoint(
    settings: IngestSettings, calls: HeldCalls, json_guard: JsonGuard
) -> ChatCompletionsEndpoint:
    limits = ChatLimits(
        models=frozenset(settings.listed_models),
        default_scenario=settings.chat_default_scenario,
        stream_idle_s=settings.chat_stream_idle_s,
        embedding_models=tuple(settings.embedding_models),
    )
    return ChatCompletionsEndpoint(calls, guard=json_guard, limits=limits)


def embeddings_endpoint(
    settings: IngestSettings, calls: HeldCalls, json_guard: JsonGuard
) -> EmbeddingsEndpoint:
    limits = EmbeddingLimits(
        models=tuple(settings.embedding_models), default_scenario=settings.embedding_default_scenario
    )
    return EmbeddingsEndpoint(calls, guard=json_guard, limits=limits)


def topics_watch(
    settings: IngestSettings, topics_check: Callable[[], None] | None, *, on_kafka: bool
) -> TopicsWatch:
    """The start-up topic check (or `topics_check`), re-run in the background for ``/readyz``;
    nothing to check with no Kafka."""
    ready = ReadinessSettings()
    if topics_check is None:
        topics_check = (
            functools.partial(
                require_topics, settings.kafka, _needed_topics(settings), timeout_s=ready.check_timeout_s
            )
            if on_kafka
            else _nothing_to_check
        )
    return TopicsWatch(topics_check, interval_s=ready.check_interval_s)


def _needed_topics(settings: IngestSettings) -> list[str]:
    # What it writes, and what its follower reads (the reply topic and the chunk topic beside it).
    return [
        *settings.kafka.topics.all_requests,
        *followed_topics(settings.kafka, settings.default_reply_topic),
    ]


def _nothing_to_check() -> None:
    return None


@asynccontextmanager
async def serve_parts(
    parts: IngestParts, *, check_topics: bool = True, reload_on_sighup: bool = False
) -> AsyncIterator[None]:
    """Start the producer, the backlog reader, the watcher, the tenants' reloader (with
    `reload_on_sighup`, SIGHUP reloads too) and the reply topic's follower, in that order; on exit
    (or when a start fails) stop whatever started, in the reverse order, the producer last so it
    flushes."""
    settings = parts.settings
    async with AsyncExitStack() as started:
        started.callback(parts.callback_resolver.close)
        if check_topics:
            await asyncio.to_thread(require_topics, settings.kafka, _needed_topics(settings))
            parts.readiness.passed()
            await parts.record_limit.read_topics()
        await parts.producer.start()
        started.push_async_callback(_flush_and_stop, parts.producer)
        await parts.backlogs.start()
        started.push_async_callback(parts.backlogs.stop)
        await parts.watcher.start()
        started.push_async_callback(parts.watcher.stop)
        await parts.tenants.start(sighup=reload_on_sighup)
        started.push_async_callback(parts.tenants.stop)
        await parts.readiness.start()
        started.push_async_callback(parts.readiness.stop)
        if parts.follower is not None:
            await parts.follower.start()
            started.push_async_callback(parts.follower.stop)
            if check_topics:
                # The topics are there, so Kafka answers: serve once outcomes are followed (until
                # then completions are refused 503), unless that takes unusually long.
                try:
                    await asyncio.wait_for(parts.follower.ready.wait(), _FOLLOW_READY_WAIT_S)
                except TimeoutError:
                    log.warning("not following the reply topic yet; chat completions answer 503 until then")
        log.info(
            "ingest ready, producing to %s; admission %s, capacities %s; records up to %d bytes; %s",
            settings.kafka.bootstrap_servers,
            "on" if parts.admission.enabled else "off",
            {t.value: c for t, c in parts.admission.capacity.items()},
            parts.record_limit.max_record_bytes,
            "OPEN MODE (no keys)" if parts.tenants.open_mode else f"tenants from {parts.tenants.path}",
        )
        yield


async def _flush_and_stop(producer: AsyncProducer) -> None:
    # Stop accepting is uvicorn's job; here every record already handed to librdkafka is flushed.
    left = await producer.stop(flush_timeout_s=_FLUSH_TIMEOUT_S)
    if left:
        log.error("%d records not acknowledged at shutdown", left)


def health_endpoint(follower: ReplyFollower | None) -> Callable[[Request], Awaitable[Response]]:
    """``GET /healthz``: 200 "ok"; 503 "follower stopped" once the reply topic's follower has died
    (chat completions would wait for outcomes nobody reads)."""

    async def healthz(_: Request) -> Response:
        if follower is not None and follower.failed:
            return JSONResponse({"status": "follower stopped"}, status_code=503)
        return JSONResponse({"status": "ok"})

    return healthz


def create_app(
    settings: IngestSettings,
    *,
    producer: AsyncProducer | None = None,
    clock_ms: Callable[[], int] = wall_ms,
    check_topics: bool = True,
    backlog: BacklogSource | None = None,
    rate_clock_s: Callable[[], float] = time.monotonic,
    metrics_meter: Meter | None = None,
    reload_on_sighup: bool = False,
    follow_feed: Callable[[], ReplyFeed] | None = None,
    hub: WaiterHub | None = None,
    topics_check: Callable[[], None] | None = None,
) -> Starlette:
    """The ingest ASGI app of `bootstrap`'s parts; its lifespan runs `serve_parts`. See `bootstrap`
    for the injections; `reload_on_sighup` (the command sets it) installs the SIGHUP handler on the
    serving loop."""
    parts = bootstrap(
        settings,
        producer=producer,
        clock_ms=clock_ms,
        backlog=backlog,
        rate_clock_s=rate_clock_s,
        metrics_meter=metrics_meter,
        follow_feed=follow_feed,
        hub=hub,
        topics_check=topics_check,
    )
    return asgi_app(parts, check_topics=check_topics, reload_on_sighup=reload_on_sighup)


# The OpenAI-compatible routes: their refusals are in OpenAI's error shape.
OPENAI_PATHS = frozenset({"/v1/chat/completions", "/v1/embeddings", "/v1/models"})


def held_refusal(path: str, refusal: HoldRefusal) -> Response:
    """The 429 of a tenant at its ``connections`` limit, in the shape of the API `path` is in."""
    error = HeldLimitError(refusal)
    if path in OPENAI_PATHS:
        return answers.refusal_error(error).response()
    return refusal_response(error)


def asgi_app(parts: IngestParts, *, check_topics: bool, reload_on_sighup: bool) -> Starlette:
    """The routes over `parts`, each tenant's requests in progress bounded (`HeldConnections`); the
    lifespan serves them (`serve_parts`)."""
    held = Middleware(HeldConnections, registry=parts.tenants, holds=parts.holds, refuse=held_refusal)
    return Starlette(
        routes=[
            Route("/v1/requests", parts.submit.handle, methods=["POST"]),
            Route("/v1/chat/completions", parts.chat.handle, methods=["POST"]),
            Route("/v1/embeddings", parts.embeddings.handle, methods=["POST"]),
            Route("/v1/models", parts.chat.models, methods=["GET"]),
            Route("/v1/backlog", parts.backlog_view.handle, methods=["GET"]),
            Route("/healthz", health_endpoint(parts.follower), methods=["GET"]),
            Route("/readyz", readiness_endpoint(parts.ready_problems), methods=["GET"]),
        ],
        middleware=[held],
        lifespan=lambda _: serve_parts(parts, check_topics=check_topics, reload_on_sighup=reload_on_sighup),
    )
