"""The dispatcher's composition root: every part built from settings, here and nowhere else.

The edges (Kafka consumer and producer, the LLM backend, the token pool, the clock) are built from
settings unless a caller passes its own, which is how the unit tests run the whole dispatcher on
fakes. Nothing is started here: `RunLoop.run` starts and stops the parts, in one order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from inferq import tracing
from inferq.dispatcher.adaptive import AdaptiveBudget, AdaptivePolicy, Budget, FixedBudget
from inferq.dispatcher.backend import Backend
from inferq.dispatcher.backend_specs import build_routes
from inferq.dispatcher.call_times import CallTimes
from inferq.dispatcher.checkpoint import Checkpoint
from inferq.dispatcher.consumer import TierConsumer
from inferq.dispatcher.deferred import ReadPositions
from inferq.dispatcher.eviction import PressurePolicy
from inferq.dispatcher.execution import Execution
from inferq.dispatcher.forecast import forecast_lending
from inferq.dispatcher.health import Health
from inferq.dispatcher.housekeeping import Housekeeping, LowEviction
from inferq.dispatcher.inflight import InFlight
from inferq.dispatcher.intake import Intake
from inferq.dispatcher.kafka_consumer import KafkaTierConsumer, Membership
from inferq.dispatcher.lag_probe import LagProbe
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.models import ModelChoice
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.offsets import OffsetTracker
from inferq.dispatcher.outcomes import OutcomeBuilder
from inferq.dispatcher.pausing import Pauses
from inferq.dispatcher.policies import Scheduler, build_scheduler
from inferq.dispatcher.rate_budget import RateBudget
from inferq.dispatcher.rate_ledger import LocalRateLedger, RateLedger
from inferq.dispatcher.readahead_shares import ReadaheadShares
from inferq.dispatcher.record_rules import RecordRules
from inferq.dispatcher.retries import RetryPolicy
from inferq.dispatcher.routing import BackendRoutes
from inferq.dispatcher.run_loop import Helper, Resource, RunLoop, Stop
from inferq.dispatcher.settings import (
    DispatcherSettings,
    breaker_policy,
    build_schedule,
    chunk_policy,
    rate_limits,
    renamed_variables_in,
)
from inferq.dispatcher.starting import Starter
from inferq.dispatcher.tenant_gate import TenantGate
from inferq.dispatcher.tenant_headroom import TenantHeadroom
from inferq.dispatcher.tenant_limits import RegistryLimits
from inferq.dispatcher.tokens import LocalTokenPool, TokenPool
from inferq.dispatcher.waiting import WaitingRoom
from inferq.dispatcher.writer import OutcomeWriter, RecordProducer
from inferq.messaging.producer import AsyncProducer
from inferq.messaging.tiers import TierPolicy
from inferq.tenancy.registry import TenantRegistry
from inferq.tracing import TracedProducer

if TYPE_CHECKING:
    from inferq.dispatcher.tokens.redis_pool import RedisTokenPool

log = logging.getLogger("inferq.dispatcher")


TOPIC_PROPAGATION_MS = 2_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TenantsWatch:
    """The tenants file watched while the dispatcher runs: reloaded on change and on SIGHUP."""

    def __init__(self, registry: TenantRegistry, *, sighup: bool) -> None:
        self._registry = registry
        self._sighup = sighup

    async def start(self) -> None:
        await self._registry.start(sighup=self._sighup)

    async def stop(self) -> None:
        await self._registry.stop()


class ProducerEdge(RecordProducer, Resource, Protocol):
    """The producer as the writer and the run loop see it: `AsyncProducer`, or a test's fake."""


@dataclass(frozen=True)
class TokenSupply:
    """The token pool, whether other dispatchers share it, and what it needs running beside it."""

    pool: TokenPool
    shared: bool
    companions: Sequence[Resource] = ()
    # How many dispatchers share the budget (read for the local shares while Redis is away).
    group_size: Callable[[], int] = lambda: 1


def redis_pool(settings: DispatcherSettings, group_size: Callable[[], int]) -> RedisTokenPool:
    """The group-wide pool from the one Redis block (`settings.redis`, ``INFERQ_REDIS_*``)."""
    from inferq.dispatcher.tokens.redis_pool import RedisTokenPool

    return RedisTokenPool.from_settings(
        settings.redis,
        owner=settings.dispatcher_id,
        group_size=group_size,
        topic_prefix=settings.kafka.topic_prefix,
    )


def token_supply(settings: DispatcherSettings) -> TokenSupply:
    if settings.coordination == "local":
        return TokenSupply(LocalTokenPool(), shared=False)
    from inferq.dispatcher.group import GroupSizeProbe

    # The group size sets the local share the pool falls back to when Redis is away.
    probe = GroupSizeProbe(settings.kafka, settings.group_id)
    return TokenSupply(
        redis_pool(settings, probe.size), shared=True, companions=(probe,), group_size=probe.size
    )


def rate_ledger(
    settings: DispatcherSettings, group_size: Callable[[], int], clock_ms: Callable[[], int]
) -> tuple[RateLedger, Sequence[Resource]]:
    """Requests and tokens per minute per model (configured or learned from the backend's headers):
    this process's with ``INFERQ_COORDINATION=local``, the group's in Redis with ``redis``; and what
    must run for it."""
    if settings.coordination == "local":
        return LocalRateLedger(RateBudget(rate_limits(settings), clock_ms=clock_ms)), ()
    from inferq.dispatcher.shared_rate.budget import SharedRateBudget

    shared = SharedRateBudget.from_settings(
        settings.redis,
        owner=settings.dispatcher_id,
        configured=rate_limits(settings),
        group_size=group_size,
        clock_ms=clock_ms,
        topic_prefix=settings.kafka.topic_prefix,
    )
    return shared, (shared,)


def adaptive_budget(settings: DispatcherSettings) -> AdaptiveBudget | None:
    if not (settings.adaptive and settings.policy == "inferq"):
        return None
    policy = AdaptivePolicy(
        max_budget=settings.budget,
        min_budget=min(settings.adaptive_min_budget, settings.budget),
        window_s=settings.adaptive_window_s,
    )
    return AdaptiveBudget(policy, time.monotonic)


@dataclass(frozen=True)
class Dispatcher:
    """What `bootstrap` returns: the run loop, and the read-only views ``/healthz`` and tests use."""

    loop: RunLoop
    status: Health

    async def run(self) -> None:
        await self.loop.run()

    def request_stop(self) -> None:
        self.loop.request_stop()

    def health(self) -> dict[str, object]:
        return self.status.snapshot()

    def ready_problems(self) -> list[str]:
        return self.status.ready_problems()

    @property
    def effective_budget(self) -> int:
        return self.status.budget.effective


def backend_routes(
    settings: DispatcherSettings, backend: Backend | Mapping[str, Backend] | None
) -> BackendRoutes:
    """The configured backends and their routes; `backend` (a test's, or a test's by name, routed
    as the settings say) replaces the clients."""
    if isinstance(backend, Mapping):
        return BackendRoutes(backend, settings.tier_backends, policy=breaker_policy(settings))
    if backend is not None:
        return BackendRoutes.single(backend)
    api_key = settings.backend_api_key.get_secret_value() if settings.backend_api_key else None
    return build_routes(
        default_url=settings.backend_url,
        default_api_key=api_key,
        backends=settings.backends,
        tiers=settings.tier_backends,
        policy=breaker_policy(settings),
        max_connections=settings.budget,
    )


def bootstrap(
    settings: DispatcherSettings,
    *,
    consumer: TierConsumer | None = None,
    producer: ProducerEdge | None = None,
    backend: Backend | Mapping[str, Backend] | None = None,
    tokens: TokenSupply | None = None,
    scheduler: Scheduler | None = None,
    clock_ms: Callable[[], int] = wall_clock_ms,
    sighup: bool = False,
) -> Dispatcher:
    """Build every part of one dispatcher from `settings`; the keyword arguments replace an edge.
    The tenants file is read here (`TenantsFileError` when it cannot be used); `sighup`: SIGHUP
    reloads it (the process's choice, not a test's)."""
    for line in renamed_variables_in(os.environ):
        log.warning("%s", line)
    topics = settings.kafka.topics
    # First: the writer stops the dispatcher through it when the producer fails for good.
    stop = Stop()
    tokens = tokens or token_supply(settings)
    pool = tokens.pool
    adaptive = adaptive_budget(settings)
    budget: Budget = adaptive or FixedBudget(settings.budget)
    scheduler = scheduler or build_scheduler(settings.policy, build_schedule(settings))
    consumer = consumer or KafkaTierConsumer(
        settings.kafka,
        settings.group_id,
        client_id=settings.dispatcher_id,
        membership=Membership(settings.session_timeout_ms, settings.heartbeat_interval_ms),
    )
    producer = producer or AsyncProducer(
        settings.kafka.producer_config(client_id=f"inferq-dispatcher-{settings.dispatcher_id}")
        # A topic the broker does not know (auto-creation is off) fails its records with "unknown
        # topic" after this long, before message.timeout.ms, instead of timing out like an outage
        # would: the writer then answers FAILED instead of waiting forever (librdkafka default 30 s).
        | {"topic.metadata.propagation.max.ms": TOPIC_PROPAGATION_MS}
    )
    routes = backend_routes(settings, backend)
    registry = TenantRegistry(
        settings.tenants.file, topics=topics, reload_interval_s=settings.tenants.reload_interval_s
    )
    if registry.load() is None:
        log.warning("dispatcher in open mode: every tenant a record names runs, with the global rules")
    gate = TenantGate(registry, default_reply_topic=topics.results, clock_ms=clock_ms)
    limits = RegistryLimits(registry)
    metrics = DispatcherMetrics(
        tokens_in_use=pool.in_use,
        tokens_held=pool.held_locally,
        effective_budget=lambda: budget.effective,
        tenant_label=gate.label,
    )

    calls = CallTimes(
        {t: s * 1000 for t, s in settings.typical_latency_s.items()}, learn=settings.learn_latency
    )
    room = WaitingRoom(
        promotion_age_ms=int(settings.promotion_age_s * 1000),
        early_drop_ms={t: int(s * 1000) for t, s in settings.typical_latency_s.items()}
        if settings.early_drop
        else None,
        tenants=limits,
        headroom=TenantHeadroom(
            slots=settings.tenant_headroom_slots,
            window_ms=round(settings.tenant_active_window_s * 1000),
            weight_of=limits.weight,
        ),
        calls=calls,
        lending=forecast_lending(calls) if settings.forecast_lending else None,
    )
    offsets = OffsetTracker()
    positions = ReadPositions(offsets)
    inflight = InFlight()
    wake = asyncio.Event()  # set by arrivals, freed tokens and housekeeping; the starter waits on it
    pauses = Pauses(
        consumer,
        topics,
        room,
        metrics,
        readahead=settings.readahead,
        inflight=inflight,
        offsets=offsets,
        max_budget=settings.budget,
        rereading=positions.rereading,
    )
    models = ModelChoice.of(
        fast=settings.model_fast, accurate=settings.model_accurate, cheap=settings.model_cheap
    )
    writer = OutcomeWriter(
        # Tracing on: each record carries the context of the request's process span.
        TracedProducer(producer, send_spans=False) if tracing.enabled() else producer,
        topics,
        OutcomeBuilder(settings.dispatcher_id),
        models,
        metrics,
        clock_ms,
        on_fatal=stop.fail,
    )
    next_start = NextStart(room, scheduler)
    rate, rate_resources = rate_ledger(settings, tokens.group_size, clock_ms)
    execution = Execution(
        routes=routes,
        pool=pool,
        writer=writer,
        models=models,
        retry_policy=RetryPolicy(
            max_attempts=settings.max_attempts,
            base_backoff_s=settings.retry_base_backoff_s,
            max_backoff_s=settings.retry_max_backoff_s,
        ),
        adaptive=adaptive,
        metrics=metrics,
        chunk_policy=chunk_policy(settings),
        clock_ms=clock_ms,
        backend_timeout_s=settings.backend_timeout_s,
        token_freed=wake,
        call_ended=lambda work, now_ms, completed: next_start.ended(work, now_ms, completed=completed),
        linger=inflight.linger,
        rate=rate,
    )
    intake = Intake(
        consumer=consumer,
        topics=topics,
        offsets=offsets,
        room=room,
        pauses=pauses,
        writer=writer,
        inflight=inflight,
        metrics=metrics,
        rules=RecordRules(
            topics=topics,
            max_attempts=settings.max_attempts,
            max_backoff_ms=int(settings.retry_max_backoff_s * 1000),
            tier_policy=TierPolicy(scenario_tiers=settings.scenario_tiers),
        ),
        readahead=settings.readahead,
        poison_alarm_ratio=settings.poison_alarm_ratio,
        clock_ms=clock_ms,
        gate=gate,
        shares=ReadaheadShares(
            room=room,
            pauses=pauses,
            limits=limits,
            readahead=settings.readahead,
            enabled=lambda: registry.directory is not None and len(registry.directory) > 1,
        ),
        positions=positions,
    )
    metrics.watch_paused(pauses.paused_by_tier)
    metrics.watch_circuits(lambda: routes.gauge(clock_ms()))
    metrics.watch_tenants(room.running_by_tenant, room.held_by_tenant, lambda: len(intake.deferred))
    metrics.watch_schedule(
        budget=settings.budget, window=scheduler.window, effective=lambda: budget.effective
    )
    starter = Starter(
        next_start=next_start,
        pool=pool,
        pool_is_shared=tokens.shared,
        budget=budget,
        max_budget=settings.budget,
        execution=execution,
        writer=writer,
        inflight=inflight,
        pauses=pauses,
        clock_ms=clock_ms,
        wake=wake,
        routes=routes,
        max_attempts=settings.max_attempts,
        rate=rate,
        models=models,
    )
    checkpoint = Checkpoint(
        consumer=consumer,
        offsets=offsets,
        room=room,
        pauses=pauses,
        commit_interval_s=settings.commit_interval_s,
    )
    housekeeping = Housekeeping(
        room=room,
        writer=writer,
        inflight=inflight,
        adaptive=adaptive,
        metrics=metrics,
        clock_ms=clock_ms,
        interval_s=settings.housekeeping_interval_s,
        promotion_age_s=settings.promotion_age_s,
        wake=wake,
    )
    helpers = [
        Helper("committer", checkpoint.run),
        Helper("starter", starter.run),
        Helper("housekeeping", housekeeping.run),
        Helper("lag-probe", LagProbe(consumer, topics, metrics).run),
    ]
    if settings.evict_low_under_pressure:

        def pressure() -> PressurePolicy:
            # Capacity by the tiers' typical call times as learned (the configured ones until calls end).
            typical_s = {tier: calls.typical_ms(tier) / 1000 for tier in settings.typical_latency_s}
            return PressurePolicy.from_budget(settings.budget, typical_s, settings.pressure_capacity)

        eviction = LowEviction(
            consumer=consumer,
            topics=topics,
            policy=pressure,
            offsets=offsets,
            room=room,
            pauses=pauses,
            writer=writer,
            inflight=inflight,
        )
        helpers.append(Helper("eviction", eviction.run))

    def describe() -> str:
        return (
            f"dispatcher {settings.dispatcher_id}: policy {scheduler.name}, budget {settings.budget}, "
            f"window {scheduler.window().name}"
        )

    loop = RunLoop(
        consumer=consumer,
        producer=producer,
        backends=routes,
        pool=pool,
        intake=intake,
        checkpoint=checkpoint,
        starter=starter,
        pauses=pauses,
        room=room,
        inflight=inflight,
        helpers=helpers,
        drain_timeout_s=settings.drain_timeout_s,
        describe=describe,
        stop=stop,
        pool_companions=(*tokens.companions, *rate_resources),
        watchers=(TenantsWatch(registry, sighup=sighup),),
    )
    health = Health(
        checkpoint=checkpoint,
        pool=pool,
        room=room,
        consumer=consumer,
        budget=budget,
        scheduler=scheduler,
        inflight=inflight,
        deferred=lambda: len(intake.deferred),
        circuits=lambda: {name: state.value for name, state in routes.states(clock_ms()).items()},
        rate_budget=rate.status,
    )
    return Dispatcher(loop, health)
