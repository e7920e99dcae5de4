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
from inferq.clock import wall_ms
from inferq.dispatcher.adaptive import AdaptiveBudget, AdaptivePolicy, FixedBudget
from inferq.dispatcher.backend import Backend
from inferq.dispatcher.backend_specs import build_routes
from inferq.dispatcher.call_times import CallTimes
from inferq.dispatcher.checkpoint import Checkpoint
from inferq.dispatcher.consumer import TierConsumer
from inferq.dispatcher.deferred import ReadPositions
from inferq.dispatcher.eviction import PressurePolicy
from inferq.dispatcher.execution import Execution
from inferq.dispatcher.forecast import forecast_lending
from inferq.dispatcher.health import DispatcherHealth
from inferq.dispatcher.housekeeping import Housekeeping, LowEviction
from inferq.dispatcher.inflight import InFlight
from inferq.dispatcher.intake import Admission, Intake
from inferq.dispatcher.kafka_consumer import KafkaTierConsumer, Membership
from inferq.dispatcher.lag_probe import LagProbe
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.models import ModelChoice
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.offsets import OffsetTracker
from inferq.dispatcher.outcomes import OutcomeBuilder
from inferq.dispatcher.parts import Budgets, CallPolicy, HeldBacklog, Instruments, KafkaPorts
from inferq.dispatcher.pausing import Pauses
from inferq.dispatcher.policies import Scheduler, build_scheduler
from inferq.dispatcher.preempting import Preemptor
from inferq.dispatcher.rate_budget import RateBudget
from inferq.dispatcher.rate_ledger import LocalRateLedger, RateLedger
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.readahead_shares import ReadaheadShares
from inferq.dispatcher.record_rules import RecordRules
from inferq.dispatcher.retries import RetryPolicy
from inferq.dispatcher.routing import BackendRoutes
from inferq.dispatcher.run_loop import Edges, Helper, Resource, RunLoop, Steps, Stop
from inferq.dispatcher.settings import (
    DispatcherSettings,
    breaker_policy,
    build_schedule,
    chunk_policy,
    preemptible_backends,
    preemptible_tiers,
    rate_limits,
    renamed_variables_in,
)
from inferq.dispatcher.starting import Starter, request_cost
from inferq.dispatcher.tenant_check import TenantCheck
from inferq.dispatcher.tenant_headroom import TenantHeadroom
from inferq.dispatcher.tenant_limits import RegistryLimits
from inferq.dispatcher.tokens import LocalTokenPool, TokenPool
from inferq.dispatcher.writer import OutcomeWriter, RecordProducer
from inferq.messaging.producer import AsyncProducer
from inferq.messaging.record_signing import RecordSigner
from inferq.messaging.tiers import TierPolicy
from inferq.messaging.topics import TopicNames
from inferq.telemetry import meter
from inferq.tenancy.metrics import watch_reloads
from inferq.tenancy.registry import TenantRegistry
from inferq.tracing import TracedProducer

if TYPE_CHECKING:
    from inferq.dispatcher.tokens.redis_pool import RedisTokenPool

log = logging.getLogger("inferq.dispatcher")


TOPIC_PROPAGATION_MS = 2_000


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
    status: DispatcherHealth

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
    clock_ms: Callable[[], int] = wall_ms,
    sighup: bool = False,
) -> Dispatcher:
    """Build every part of one dispatcher from `settings`; the keyword arguments replace an edge.
    The tenants file is read here (`TenantsFileError` when it cannot be used); `sighup`: SIGHUP
    reloads it (the process's choice, not a test's)."""
    warn_renamed_variables()
    # First: the writer stops the dispatcher through it when the producer fails for good.
    stop = Stop()
    tokens = tokens or token_supply(settings)
    rate, rate_resources = rate_ledger(settings, tokens.group_size, clock_ms)
    budgets = budget_parts(settings, tokens, rate)
    calls = call_policy(settings, backend_routes(settings, backend))
    scheduler = scheduler or build_scheduler(
        settings.policy, build_schedule(settings), preemptible=preemptible_tiers(settings, calls.routes)
    )
    kafka = KafkaPorts(consumer or kafka_consumer(settings), settings.kafka.topics)
    # A test's producer writes the chunks too; else they have their own (acks=1: they are transient).
    chunk_producer = None if producer is not None else kafka_chunk_producer(settings)
    producer = producer or kafka_producer(settings)
    tenants = tenant_parts(settings, clock_ms)
    instruments = Instruments(dispatcher_metrics(budgets, tenants.check), clock_ms, time.monotonic)
    times = call_times(settings)
    held, positions = held_backlog(settings, kafka, readahead_of(settings, tenants, times), instruments)
    writer = outcome_writer(
        settings,
        producer,
        kafka.topics,
        calls.models,
        instruments,
        stop,
        RecordSigner(tenants.registry.service_record_keys),
        chunk_producer,
    )
    preemptor = preemptor_of(settings, scheduler, held.readahead, instruments, times)
    limit = settings.max_preemptions if preemptor is not None else None
    next_start = NextStart(held.readahead, scheduler, max_preemptions=limit)
    execution = Execution(
        calls=calls,
        budgets=budgets,
        writer=writer,
        instruments=instruments,
        call_ended=lambda work, now_ms, completed: next_start.ended(work, now_ms, completed=completed),
        linger=held.inflight.linger,
        preemptor=preemptor,
    )
    intake = Intake(
        kafka=kafka,
        held=held,
        writer=writer,
        admission=admission(settings, kafka.topics, held, tenants),
        positions=positions,
        instruments=instruments,
    )
    watch_gauges(instruments, held, calls.routes, intake, budgets, scheduler)
    starter = Starter(
        next_start=next_start,
        budgets=budgets,
        calls=calls,
        held=held,
        execution=execution,
        instruments=instruments,
        preemptor=preemptor,
    )
    checkpoint = checkpoint_of(settings, kafka, held)
    helpers = [
        Helper("committer", checkpoint.run),
        Helper("starter", starter.run),
        Helper("housekeeping", housekeeping(settings, held, writer, budgets, instruments).run),
        Helper("lag-probe", LagProbe(kafka.consumer, kafka.topics, instruments.metrics).run),
        *low_eviction(settings, kafka, held, writer, times),
    ]
    edges = Edges(
        watchers=(TenantsWatch(tenants.registry, sighup=sighup),),
        pool_companions=(*tokens.companions, *rate_resources),
        pool=budgets.pool,
        backends=calls.routes,
        producers=(producer,) if chunk_producer is None else (producer, chunk_producer),
        consumer=kafka.consumer,
    )
    loop = RunLoop(
        edges=edges,
        steps=Steps(intake, checkpoint, starter, helpers),
        held=held,
        stop=stop,
        drain_timeout_s=settings.drain_timeout_s,
        describe=describer(settings, scheduler),
    )
    return Dispatcher(
        loop, health(checkpoint, kafka, held, budgets, scheduler, intake, calls.routes, clock_ms)
    )


# The builders `bootstrap` lists, in the order it calls them.


def warn_renamed_variables() -> None:
    for line in renamed_variables_in(os.environ):
        log.warning("%s", line)


def budget_parts(settings: DispatcherSettings, tokens: TokenSupply, rate: RateLedger) -> Budgets:
    adaptive = adaptive_budget(settings)
    return Budgets(
        pool=tokens.pool,
        pool_is_shared=tokens.shared,
        budget=adaptive or FixedBudget(settings.budget),
        adaptive=adaptive,
        max_budget=settings.budget,
        rate=rate,
        wake=asyncio.Event(),  # set by arrivals, freed tokens and housekeeping; the starter waits on it
    )


def kafka_consumer(settings: DispatcherSettings) -> KafkaTierConsumer:
    return KafkaTierConsumer(
        settings.kafka,
        settings.group_id,
        client_id=settings.dispatcher_id,
        membership=Membership(settings.session_timeout_ms, settings.heartbeat_interval_ms),
    )


def kafka_chunk_producer(settings: DispatcherSettings) -> AsyncProducer:
    return AsyncProducer(
        settings.kafka.chunk_producer_config(client_id=f"inferq-dispatcher-{settings.dispatcher_id}-chunks")
    )


def kafka_producer(settings: DispatcherSettings) -> AsyncProducer:
    return AsyncProducer(
        settings.kafka.producer_config(client_id=f"inferq-dispatcher-{settings.dispatcher_id}")
        # A topic the broker does not know (auto-creation is off) fails its records with "unknown
        # topic" after this long, before message.timeout.ms, instead of timing out like an outage
        # would: the writer then answers FAILED instead of waiting forever (librdkafka default 30 s).
        | {"topic.metadata.propagation.max.ms": TOPIC_PROPAGATION_MS}
    )


def preemptor_of(
    settings: DispatcherSettings,
    scheduler: Scheduler,
    readahead: ReadAhead,
    instruments: Instruments,
    times: CallTimes,
) -> Preemptor | None:
    """Preemption (``preempting.py``) when a backend is preemptible and the policy is the tiered
    one (the baselines lend nothing past a ceiling)."""
    preemptible = preemptible_backends(settings)
    if not preemptible or scheduler.name != "inferq":
        return None
    return Preemptor(
        preemptible=preemptible,
        max_preemptions=settings.max_preemptions,
        readahead=readahead,
        metrics=instruments.metrics,
        clock_ms=instruments.clock_ms,
        typical_ms=times.typical_ms,
        estimate=request_cost,
    )


def call_policy(settings: DispatcherSettings, routes: BackendRoutes) -> CallPolicy:
    return CallPolicy(
        routes=routes,
        models=ModelChoice.of(
            fast=settings.model_fast, accurate=settings.model_accurate, cheap=settings.model_cheap
        ),
        retries=RetryPolicy(
            max_attempts=settings.max_attempts,
            base_backoff_s=settings.retry_base_backoff_s,
            max_backoff_s=settings.retry_max_backoff_s,
        ),
        chunks=chunk_policy(settings),
        backend_timeout_s=settings.backend_timeout_s,
    )


@dataclass(frozen=True)
class Tenants:
    """The tenants file, the tenant check every record passes, and the per-tenant limits read from it."""

    registry: TenantRegistry
    check: TenantCheck
    limits: RegistryLimits

    def several(self) -> bool:
        return self.registry.directory is not None and len(self.registry.directory) > 1


def tenant_parts(settings: DispatcherSettings, clock_ms: Callable[[], int]) -> Tenants:
    topics = settings.kafka.topics
    registry = TenantRegistry.loaded(settings.tenants, topics, signs_records=True)
    watch_reloads(meter("inferq.dispatcher"), registry)
    if registry.open_mode:
        log.warning("dispatcher in open mode: every tenant a record names runs, with the global rules")
    check = TenantCheck(registry, default_reply_topic=topics.results, clock_ms=clock_ms)
    return Tenants(registry, check, RegistryLimits(registry))


def dispatcher_metrics(budgets: Budgets, check: TenantCheck) -> DispatcherMetrics:
    return DispatcherMetrics(
        tokens_in_use=budgets.pool.in_use,
        tokens_held=budgets.pool.held_locally,
        effective_budget=lambda: budgets.budget.effective,
        tenant_label=check.label,
    )


def call_times(settings: DispatcherSettings) -> CallTimes:
    return CallTimes(
        {t: s * 1000 for t, s in settings.typical_latency_s.items()}, learn=settings.learn_latency
    )


def readahead_of(settings: DispatcherSettings, tenants: Tenants, calls: CallTimes) -> ReadAhead:
    return ReadAhead(
        promotion_age_ms=int(settings.promotion_age_s * 1000),
        early_drop_ms={t: int(s * 1000) for t, s in settings.typical_latency_s.items()}
        if settings.early_drop
        else None,
        tenants=tenants.limits,
        headroom=TenantHeadroom(
            slots=settings.tenant_headroom_slots,
            window_ms=round(settings.tenant_active_window_s * 1000),
            weight_of=tenants.limits.weight,
        ),
        calls=calls,
        lending=forecast_lending(calls) if settings.forecast_lending else None,
    )


def held_backlog(
    settings: DispatcherSettings, kafka: KafkaPorts, readahead: ReadAhead, instruments: Instruments
) -> tuple[HeldBacklog, ReadPositions]:
    """What this process holds of the backlog, and where the consumer reads (which intake moves
    and pausing asks)."""
    offsets = OffsetTracker()
    positions = ReadPositions(offsets)
    inflight = InFlight()
    pauses = Pauses(
        kafka.consumer,
        kafka.topics,
        readahead,
        instruments.metrics,
        per_tier=settings.readahead,
        inflight=inflight,
        offsets=offsets,
        max_budget=settings.budget,
        rereading=positions.rereading,
    )
    return HeldBacklog(readahead, offsets, inflight, pauses), positions


def outcome_writer(
    settings: DispatcherSettings,
    producer: ProducerEdge,
    topics: TopicNames,
    models: ModelChoice,
    instruments: Instruments,
    stop: Stop,
    signer: RecordSigner,
    chunk_producer: ProducerEdge | None = None,
) -> OutcomeWriter:
    writes: RecordProducer = producer
    chunks: RecordProducer | None = chunk_producer
    if tracing.enabled():
        # Each record, chunks included, carries the context of the request's process span.
        writes = TracedProducer(producer, send_spans=False)
        chunks = TracedProducer(chunk_producer, send_spans=False) if chunk_producer else None
    return OutcomeWriter(
        writes,
        topics,
        OutcomeBuilder(settings.dispatcher_id),
        models,
        instruments.metrics,
        instruments.clock_ms,
        on_fatal=stop.fail,
        signer=signer,
        chunk_producer=chunks,
    )


def admission(
    settings: DispatcherSettings, topics: TopicNames, held: HeldBacklog, tenants: Tenants
) -> Admission:
    return Admission(
        rules=RecordRules(
            topics=topics,
            max_attempts=settings.max_attempts,
            max_backoff_ms=int(settings.retry_max_backoff_s * 1000),
            tier_policy=TierPolicy(scenario_tiers=settings.scenario_tiers),
            max_append_lag_ms=round(settings.created_at_max_lag_s * 1000),
        ),
        tenant_check=tenants.check,
        shares=ReadaheadShares(
            readahead=held.readahead,
            pauses=held.pauses,
            limits=tenants.limits,
            per_tier=settings.readahead,
            enabled=tenants.several,
        ),
        readahead_per_tier=settings.readahead,
        poison_alarm_ratio=settings.poison_alarm_ratio,
    )


def watch_gauges(
    instruments: Instruments,
    held: HeldBacklog,
    routes: BackendRoutes,
    intake: Intake,
    budgets: Budgets,
    scheduler: Scheduler,
) -> None:
    metrics, clock_ms = instruments.metrics, instruments.clock_ms
    metrics.watch_paused(held.pauses.paused_by_tier)
    metrics.watch_circuits(lambda: routes.gauge(clock_ms()))
    metrics.watch_tenants(
        held.readahead.running_by_tenant, held.readahead.held_by_tenant, lambda: len(intake.deferred)
    )
    metrics.watch_schedule(
        budget=budgets.max_budget, window=scheduler.window, effective=lambda: budgets.budget.effective
    )


def checkpoint_of(settings: DispatcherSettings, kafka: KafkaPorts, held: HeldBacklog) -> Checkpoint:
    return Checkpoint(
        consumer=kafka.consumer,
        offsets=held.offsets,
        readahead=held.readahead,
        pauses=held.pauses,
        commit_interval_s=settings.commit_interval_s,
    )


def housekeeping(
    settings: DispatcherSettings,
    held: HeldBacklog,
    writer: OutcomeWriter,
    budgets: Budgets,
    instruments: Instruments,
) -> Housekeeping:
    return Housekeeping(
        held=held,
        writer=writer,
        budgets=budgets,
        instruments=instruments,
        interval_s=settings.housekeeping_interval_s,
        promotion_age_s=settings.promotion_age_s,
    )


def low_eviction(
    settings: DispatcherSettings,
    kafka: KafkaPorts,
    held: HeldBacklog,
    writer: OutcomeWriter,
    calls: CallTimes,
) -> list[Helper]:
    """The eviction helper, when LOW is evicted under pressure (none otherwise)."""
    if not settings.evict_low_under_pressure:
        return []

    def pressure() -> PressurePolicy:
        # Capacity by the tiers' typical call times as learned (the configured ones until calls end).
        typical_s = {tier: calls.typical_ms(tier) / 1000 for tier in settings.typical_latency_s}
        return PressurePolicy.from_budget(settings.budget, typical_s, settings.pressure_capacity)

    eviction = LowEviction(kafka=kafka, held=held, writer=writer, policy=pressure)
    return [Helper("eviction", eviction.run)]


def describer(settings: DispatcherSettings, scheduler: Scheduler) -> Callable[[], str]:
    preemptible = sorted(preemptible_backends(settings)) if scheduler.name == "inferq" else []
    preemption = f", preemptible backends {', '.join(preemptible)}" if preemptible else ""

    def describe() -> str:
        return (
            f"dispatcher {settings.dispatcher_id}: policy {scheduler.name}, budget {settings.budget}, "
            f"window {scheduler.window().name}{preemption}"
        )

    return describe


def health(
    checkpoint: Checkpoint,
    kafka: KafkaPorts,
    held: HeldBacklog,
    budgets: Budgets,
    scheduler: Scheduler,
    intake: Intake,
    routes: BackendRoutes,
    clock_ms: Callable[[], int],
) -> DispatcherHealth:
    return DispatcherHealth(
        checkpoint=checkpoint,
        pool=budgets.pool,
        readahead=held.readahead,
        consumer=kafka.consumer,
        budget=budgets.budget,
        scheduler=scheduler,
        inflight=held.inflight,
        deferred=lambda: len(intake.deferred),
        circuits=lambda: {name: state.value for name, state in routes.states(clock_ms()).items()},
        rate_budget=budgets.rate.status,
    )
