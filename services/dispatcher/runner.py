"""The dispatcher's run loop.

Fetch → admit (decode, drop expired, hold in the waiting room) → start what the scheduler and the
token pool allow → pause tiers whose read-ahead is full, so the backlog stays in Kafka. Starting
is event-driven: one starter task wakes on every arrival, completion and housekeeping change, not
on a tick. An outcome is produced (acks=all) before its offset may be committed; commits go out on
a short interval and synchronously for revoked partitions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from services.dispatcher.adaptive import AdaptiveBudget
from services.dispatcher.backend import ChatBackend
from services.dispatcher.consumer import TierConsumer
from services.dispatcher.errors import BackendError
from services.dispatcher.eviction import PressurePolicy
from services.dispatcher.metrics import DispatcherMetrics
from services.dispatcher.offsets import OffsetTracker, PartitionOffsets
from services.dispatcher.outcomes import OutcomeBuilder
from services.dispatcher.poison import PoisonWatch
from services.dispatcher.policies import Scheduler
from services.dispatcher.retries import RetryPolicy
from services.dispatcher.settings import DispatcherSettings
from services.dispatcher.tokens import Lease, TokenPool
from services.dispatcher.waiting import WaitingRoom
from services.dispatcher.work import Work
from services.dispatcher.writer import OutcomeWriter
from services.messaging.codec import request_codec
from services.messaging.errors import DecodeError
from services.messaging.producer import AsyncProducer
from services.messaging.records import runnable_params
from services.messaging.tiers import Tier

log = logging.getLogger("inferq.dispatcher")

FETCH_TIMEOUT_MS = 100
ASSIGNMENT_WAIT_S = 30.0
# With a shared pool, tokens freed by other dispatchers wake nobody here: look again this often.
SHARED_POOL_RECHECK_S = 0.02


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Dispatcher:
    def __init__(
        self,
        settings: DispatcherSettings,
        *,
        consumer: TierConsumer,
        producer: AsyncProducer,
        backend: ChatBackend,
        scheduler: Scheduler,
        pool: TokenPool,
        pool_is_shared: bool,
        adaptive: AdaptiveBudget | None,
        metrics: DispatcherMetrics,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._settings = settings
        self._consumer = consumer
        self._producer = producer
        self._backend = backend
        self._scheduler = scheduler
        self._pool = pool
        self._pool_is_shared = pool_is_shared
        self._adaptive = adaptive
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._topics = settings.kafka.topics
        self._offsets = OffsetTracker()
        self._just_revoked: dict[tuple[str, int], PartitionOffsets] = {}
        self._assignment_ready = asyncio.Event()
        self._room = WaitingRoom(
            promotion_age_ms=int(settings.promotion_age_s * 1000),
            early_drop_ms={t: int(s * 1000) for t, s in settings.typical_latency_s.items()}
            if settings.early_drop
            else None,
        )
        self._pressure = (
            PressurePolicy.from_budget(
                settings.budget, settings.typical_latency_s, settings.pressure_capacity
            )
            if settings.evict_low_under_pressure
            else None
        )
        self._pressed_tier: Tier | None = None
        self._poison = PoisonWatch(time.monotonic, threshold=settings.poison_alarm_ratio)
        metrics.watch_poison(self._poison.ratios)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._requests = request_codec()
        self._models = {
            Tier.HIGH: settings.model_fast,
            Tier.MEDIUM: settings.model_accurate,
            Tier.LOW: settings.model_cheap,
        }
        retry_policy = RetryPolicy(
            max_attempts=settings.max_attempts,
            base_backoff_s=settings.retry_base_backoff_s,
            max_backoff_s=settings.retry_max_backoff_s,
        )
        self._writer = OutcomeWriter(
            producer,
            self._topics,
            OutcomeBuilder(settings.dispatcher_id),
            retry_policy,
            metrics,
            clock_ms,
            self._model_for,
        )

    @property
    def effective_budget(self) -> int:
        return self._adaptive.effective if self._adaptive is not None else self._settings.budget

    def health(self) -> dict[str, Any]:
        return {
            "assigned": len(self._offsets.owned()),
            "tokens_in_use": sum(self._pool.held_locally().values()),
            "waiting": len(self._room),
            "held_by_tier": {t.value: self._room.held(t) for t in Tier},
            "paused_partitions": self._consumer.paused_partition_count(),
            "effective_budget": self.effective_budget,
            "window": self._scheduler.window().name,
            "policy": self._scheduler.name,
        }

    def request_stop(self) -> None:
        """Signal handlers only call this; shutdown itself happens in `run`."""
        self._stop.set()

    async def run(self) -> None:
        await self._pool.start()
        await self._producer.start()
        await self._consumer.start(self._on_revoked, self._on_assigned)
        helpers = [
            asyncio.create_task(self._commit_loop(), name="committer"),
            asyncio.create_task(self._starter_loop(), name="starter"),
            asyncio.create_task(self._housekeeping_loop(), name="housekeeping"),
        ]
        if self._pressure is not None:
            helpers.append(asyncio.create_task(self._eviction_loop(), name="eviction"))
        log.info(
            "dispatcher %s started: policy %s, budget %d, window %s",
            self._settings.dispatcher_id,
            self._scheduler.name,
            self._settings.budget,
            self._scheduler.window().name,
        )
        try:
            while not self._stop.is_set():
                batches = await self._consumer.fetch(self._fetch_room(), FETCH_TIMEOUT_MS)
                if batches and not self._assignment_ready.is_set():
                    await self._await_assignment()
                for tp, records in batches.items():
                    self._admit_batch(tp, records)
                if batches:
                    self._wake.set()
                self._update_pauses()
        finally:
            await self._shutdown(helpers)

    async def _shutdown(self, helpers: list[asyncio.Task[None]]) -> None:
        # Order matters: stop starting and fetching, let running calls finish (bounded) and write
        # their outcomes, commit what is durable, leave the group so a peer takes over at once,
        # then give the tokens back.
        for task in helpers:
            task.cancel()
        await asyncio.wait(helpers, timeout=5.0)
        self._consumer.set_paused(set(Tier))
        self._room.clear()  # never started: the next owner reads them again from the committed offset
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self._settings.drain_timeout_s)
            for task in pending:
                task.cancel()
            if pending:
                log.warning(
                    "%d calls still running after %.0f s; left to the next owner",
                    len(pending),
                    self._settings.drain_timeout_s,
                )
                await asyncio.wait(pending, timeout=5.0)
        await self._commit_now()
        await self._consumer.stop()
        await self._producer.stop()
        await self._backend.close()
        await self._pool.stop()
        log.info("dispatcher %s stopped cleanly", self._settings.dispatcher_id)

    # -- intake -------------------------------------------------------------------------------

    def _fetch_room(self) -> int:
        room = sum(max(0, self._settings.readahead - self._room.held(t)) for t in Tier)
        return max(1, room)

    def _admit_batch(self, tp: TopicPartition, records: list[Any]) -> None:
        """Admit records while the read-ahead has room and (on the retry topic) while they are due.

        The partition is rewound to the first record left over, so it is fetched again later: the
        read-ahead bound holds exactly, and a retry partition waits paused until its head is due.
        """
        retry = self._consumer.is_retry(tp)
        offsets = self._offsets.owned_state(tp.topic, tp.partition)
        if offsets is None:
            return  # fetched just before its partition was revoked: the new owner reads it
        for record in records:
            if offsets.handled_already(record.offset):
                offsets.track(record.offset)  # its outcome is written or on its way: not redone
                self._metrics.record_skipped_redo()
                continue
            raw: bytes = record.value or b""
            try:
                request = self._requests.decode(raw)
                params = runnable_params(request, raw_size=len(raw))
            except DecodeError as exc:
                self._watch_poison(tp.topic, poison=True)
                offsets.track(record.offset)
                offsets.start(record.offset)
                self._spawn(self._poison_record(tp, record.offset, raw, str(exc), offsets), "dlq")
                continue
            self._watch_poison(tp.topic, poison=False)
            tier = request.tier if retry else self._consumer.tier_of(tp) or request.tier
            if retry:
                wait_ms = (request.not_before_ms or 0) - self._clock_ms()
                if wait_ms > 0:
                    self._hold_back(tp, record.offset, wait_ms / 1000)
                    return
                if len(self._room) >= len(Tier) * self._settings.readahead:
                    self._consumer.seek(tp, record.offset)
                    return
            elif self._room.held(tier) >= self._settings.readahead:
                self._consumer.seek(tp, record.offset)
                return
            offsets.track(record.offset)
            work = Work(
                request=request, tier=tier, offsets=offsets, offset=record.offset, raw=raw, params=params
            )
            reason = self._room.check(work, self._clock_ms())
            if reason is not None:
                self._begin(work, self._writer.expire(work, reason), "expire")
            else:
                self._room.add(work)

    def _watch_poison(self, topic: str, *, poison: bool) -> None:
        if self._poison.record(topic, poison=poison):
            log.error(
                "%.0f%% of the records on %s in the last %.0f s could not be decoded and went to the "
                "dead-letter topic: is a producer writing the wrong format?",
                100 * self._poison.ratio(topic),
                topic,
                self._poison.window_s,
            )

    def _hold_back(self, tp: TopicPartition, offset: int, delay_s: float) -> None:
        """The retry partition's head is not due: rewind to it and pause the partition until it is."""
        self._consumer.seek(tp, offset)
        self._consumer.hold_back(tp, time.monotonic() + delay_s)
        asyncio.get_running_loop().call_later(delay_s, self._consumer.release, tp)

    def _update_pauses(self) -> None:
        full = {t for t in Tier if self._room.held(t) >= self._settings.readahead}
        self._consumer.set_paused(full, retries=len(self._room) >= len(Tier) * self._settings.readahead)
        self._metrics.observe_room(self._room, self._consumer.paused_partition_count())

    # -- starting -----------------------------------------------------------------------------

    async def _starter_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            blocked = await self._start_ready()
            self._update_pauses()
            if blocked and self._pool_is_shared:
                self._wake_later(SHARED_POOL_RECHECK_S)

    def _wake_later(self, delay_s: float) -> None:
        asyncio.get_running_loop().call_later(delay_s, self._wake.set)

    async def _start_ready(self) -> bool:
        """Start every request the scheduler and the pool allow; True if work waits for a token."""
        for _ in range(4 * self._settings.budget + 4):  # bounded: a stale snapshot is retried, not spun on
            demand = self._room.demand()
            if not any(demand.waiting.values()):
                return False
            in_use = self._pool.in_use()
            budget = self.effective_budget
            tier = self._scheduler.next_tier(in_use, demand, budget)
            if tier is None:
                return True
            lease = await self._pool.try_acquire(tier, total_limit=budget, tier_limit=in_use.get(tier, 0) + 1)
            if lease is None:
                continue  # another dispatcher took it first; the pool refreshed its snapshot
            work = self._room.pop(tier)
            if work is None:  # its partition was revoked while we asked the pool
                await self._pool.release(lease)
                continue
            reason = self._room.check(work, self._clock_ms())
            if reason is not None:
                await self._pool.release(lease)
                self._begin(work, self._writer.expire(work, reason), "expire")
                continue
            self._begin(work, self._execute(work, lease), "call")
        return True

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.housekeeping_interval_s)
            expired, promoted = self._room.sweep(self._clock_ms())
            for item in expired:
                self._begin(item.work, self._writer.expire(item.work, item.reason), "expire")
            if promoted:
                self._metrics.record_promoted(promoted)
                log.info(
                    "%d LOW requests waited past %.0f s: served as MEDIUM",
                    promoted,
                    self._settings.promotion_age_s,
                )
            if self._adaptive is not None:
                before = self._adaptive.effective
                self._adaptive.tick()
                self._note_budget_change(before)
            if expired or promoted or self._adaptive is not None:
                self._wake.set()

    async def _eviction_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                lags = await self._consumer.lag_by_tier()
            except (TimeoutError, KafkaError) as exc:
                log.debug("backlog unknown, no eviction this round: %s", exc)
                continue
            backlog = {t: (lag + self._room.held(t), share) for t, (lag, share) in lags.items()}
            pressed = self._pressure.pressed(backlog) if self._pressure is not None else None
            if pressed != self._pressed_tier:
                log.warning(
                    "%s backlog over capacity: evicting waiting LOW" if pressed else "pressure over: %s",
                    pressed or self._pressed_tier,
                )
                self._pressed_tier = pressed
            if pressed is None:
                continue
            for work in self._room.take_unpromoted_low():
                self._begin(work, self._writer.evict(work), "evict")
            self._update_pauses()

    # -- execution ----------------------------------------------------------------------------

    def _model_for(self, work: Work) -> str:
        return work.request.model or self._models[work.tier]

    async def _execute(self, work: Work, lease: Lease) -> None:
        dispatched_at = self._clock_ms()
        self._metrics.record_queue_wait(work.tier, (dispatched_at - work.created_at_ms) / 1000)
        model = self._model_for(work)
        remaining_s = (work.expire_at_ms - dispatched_at) / 1000
        timeout_s = max(0.001, min(self._settings.backend_timeout_s, remaining_s))
        # A timeout the request's own deadline imposed says the request ran out of time, not that
        # the backend is overloaded: it must not cut the budget.
        deadline_bound = remaining_s < self._settings.backend_timeout_s
        started = time.monotonic()
        failure: BackendError | None = None
        try:
            completion = await self._backend.complete(
                model, work.request.openai_messages(), work.params, timeout_s=timeout_s
            )
        except BackendError as exc:
            failure = exc
        finally:
            # The token is the backend's concurrency: it comes free when the call ends, however it ends.
            await self._pool.release(lease)
            self._wake.set()
        if failure is not None:
            if not (failure.timed_out and deadline_bound):
                self._record_backend_failure(failure)
            await self._writer.failure(work, failure, dispatched_at)
            return
        if self._adaptive is not None:
            before = self._adaptive.effective
            self._adaptive.record_success(model, time.monotonic() - started)
            self._note_budget_change(before)
        await self._writer.ok(work, completion, dispatched_at)

    def _record_backend_failure(self, exc: BackendError) -> None:
        if exc.overload and self._adaptive is not None:
            before = self._adaptive.effective
            self._adaptive.record_overload()
            self._note_budget_change(before)

    def _note_budget_change(self, before: int) -> None:
        if self._adaptive is not None and self._adaptive.effective != before:
            log.warning(
                "effective budget %d -> %d (%s)", before, self._adaptive.effective, self._adaptive.last_reason
            )

    async def _poison_record(
        self, tp: TopicPartition, offset: int, raw: bytes, reason: str, offsets: PartitionOffsets
    ) -> None:
        await self._writer.poison(tp.topic, tp.partition, offset, raw, reason)
        offsets.complete(offset)

    def _begin(self, work: Work, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Work leaves the read-ahead for good: mark it started, then run its coroutine."""
        work.begin()
        self._spawn(coro, name)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- offsets ------------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.commit_interval_s)
            await self._commit_now()

    async def _commit_now(self, only: list[TopicPartition] | None = None) -> None:
        wanted = {(tp.topic, tp.partition) for tp in only} if only is not None else None
        commits: dict[TopicPartition, tuple[int, str]] = {}
        taken = []
        for state in self._offsets.owned():
            if wanted is not None and (state.topic, state.partition) not in wanted:
                continue
            pending = state.take_commit()
            if pending is not None:
                commits[TopicPartition(state.topic, state.partition)] = (pending.position, pending.metadata)
                taken.append((state, pending))
        if not commits:
            return
        await self._consumer.commit(commits)
        for state, pending in taken:
            state.mark_committed(pending)

    async def _await_assignment(self) -> None:
        """aiokafka lets fetching resume before the assignment callback has finished; records must
        not be admitted before it has (it says which offsets are already handled)."""
        try:
            await asyncio.wait_for(self._assignment_ready.wait(), ASSIGNMENT_WAIT_S)
        except TimeoutError:
            log.warning("partition assignment not settled after %.0f s; admitting anyway", ASSIGNMENT_WAIT_S)

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        self._assignment_ready.clear()
        await self._commit_now(only=revoked)
        self._room.drop_sources({(tp.topic, tp.partition) for tp in revoked})
        for tp in revoked:
            state = self._offsets.revoke(tp.topic, tp.partition)
            if state is not None:
                self._just_revoked[(tp.topic, tp.partition)] = state
        log.info("partitions revoked: %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in revoked))

    async def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        states = {tp: self._offsets.assign(tp.topic, tp.partition) for tp in assigned}
        # An eager rebalance revokes everything and hands most partitions back to the same member:
        # its calls still running for them complete into the new assignment instead of being redone.
        for tp, state in states.items():
            previous = self._just_revoked.pop((tp.topic, tp.partition), None)
            if previous is not None:
                state.adopt(previous)
        self._just_revoked.clear()
        # Outcomes a previous owner wrote beyond its commit are in the commit metadata: skip them.
        for tp, done in (await self._consumer.done_beyond_commit(assigned)).items():
            states[tp].skip_done(done)
        self._assignment_ready.set()
        log.info("partitions assigned: %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned))
