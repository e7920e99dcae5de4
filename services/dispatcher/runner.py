"""The dispatcher's run loop.

Fetch → admit (decode, drop expired, queue by tier) → start what the budget allows → pause tiers
whose read-ahead is full. Starting is event-driven: on every arrival and every completion, never
on a timer tick. An outcome is produced (acks=all) before its offset may be committed; commits go
out on a short interval and synchronously for revoked partitions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition

from services.dispatcher.backend import ChatBackend
from services.dispatcher.budget import TokenBudget
from services.dispatcher.consumer import TierConsumer
from services.dispatcher.errors import BackendError
from services.dispatcher.metrics import DispatcherMetrics
from services.dispatcher.offsets import OffsetTracker
from services.dispatcher.outcomes import OutcomeBuilder
from services.dispatcher.settings import DispatcherSettings
from services.dispatcher.work import Work
from services.messaging.codec import AvroCodec, request_codec, result_codec
from services.messaging.errors import DecodeError
from services.messaging.producer import AsyncProducer
from services.messaging.tiers import Tier

log = logging.getLogger("inferq.dispatcher")

FETCH_TIMEOUT_MS = 100


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
        budget: TokenBudget,
        metrics: DispatcherMetrics,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._settings = settings
        self._consumer = consumer
        self._producer = producer
        self._backend = backend
        self._budget = budget
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._topics = settings.kafka.topics
        self._offsets = OffsetTracker()
        self._waiting: dict[Tier, deque[Work]] = {t: deque() for t in Tier}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self._outcomes = OutcomeBuilder(settings.dispatcher_id)
        self._requests = request_codec()
        self._results = result_codec()
        self._models = {
            Tier.HIGH: settings.model_fast,
            Tier.MEDIUM: settings.model_accurate,
            Tier.LOW: settings.model_cheap,
        }

    def health(self) -> dict[str, int]:
        return {
            "assigned": len(self._offsets.owned()),
            "tokens_in_use": self._budget.in_use,
            "waiting": sum(len(q) for q in self._waiting.values()),
        }

    def request_stop(self) -> None:
        """Signal handlers only call this; shutdown itself happens in `run`."""
        self._stop.set()

    async def run(self) -> None:
        await self._producer.start()
        await self._consumer.start(self._on_revoked, self._on_assigned)
        committer = asyncio.create_task(self._commit_loop(), name="committer")
        log.info("dispatcher %s started, budget %d", self._settings.dispatcher_id, self._budget.limit)
        try:
            while not self._stop.is_set():
                batches = await self._consumer.fetch(self._fetch_room(), FETCH_TIMEOUT_MS)
                for tp, records in batches.items():
                    for record in records:
                        self._admit(tp, record.offset, record.value)
                self._start_ready()
                self._update_pauses()
        finally:
            await self._shutdown(committer)

    async def _shutdown(self, committer: asyncio.Task[None]) -> None:
        # Order matters: stop taking new work, let running calls finish (bounded) and write their
        # outcomes, commit what is durable, then leave the group so a peer takes over at once.
        self._consumer.set_paused(set(Tier))
        for queue in self._waiting.values():
            queue.clear()  # never started: the next owner reads them again from the committed offset
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
        committer.cancel()
        await self._commit_now()
        await self._consumer.stop()
        await self._producer.stop()
        await self._backend.close()
        log.info("dispatcher %s stopped cleanly", self._settings.dispatcher_id)

    # -- intake -------------------------------------------------------------------------------

    def _fetch_room(self) -> int:
        room = sum(max(0, self._settings.readahead_per_tier - len(q)) for q in self._waiting.values())
        return max(1, room)

    def _admit(self, tp: TopicPartition, offset: int, value: bytes | None) -> None:
        offsets = self._offsets.get(tp.topic, tp.partition)
        offsets.track(offset)
        tier = self._consumer.tier_of(tp)
        try:
            request = _decode_request(self._requests, value or b"")
        except DecodeError as exc:
            self._spawn(self._dead_letter(tp, offset, value or b"", str(exc), offsets.complete), "dlq")
            return
        work = Work(request=request, tier=tier, offsets=offsets, offset=offset)
        if self._clock_ms() >= work.expire_at_ms:
            self._spawn(self._expire(work), "expire")
            return
        self._waiting[tier].append(work)

    # -- scheduling ---------------------------------------------------------------------------

    def _start_ready(self) -> None:
        while True:
            waiting = {t: len(q) for t, q in self._waiting.items()}
            tier = self._budget.next_tier(waiting)
            if tier is None:
                return
            work = self._waiting[tier].popleft()
            if self._clock_ms() >= work.expire_at_ms:
                self._spawn(self._expire(work), "expire")
                continue
            self._budget.acquire(tier)
            self._spawn(self._execute(work), "call")

    def _update_pauses(self) -> None:
        full = {t for t, q in self._waiting.items() if len(q) >= self._settings.readahead_per_tier}
        self._consumer.set_paused(full)
        for tier in Tier:
            self._metrics.set_waiting(tier, len(self._waiting[tier]))

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- execution ----------------------------------------------------------------------------

    def _model_for(self, work: Work) -> str:
        return str(work.request.get("model") or self._models[work.tier])

    async def _execute(self, work: Work) -> None:
        dispatched_at = self._clock_ms()
        self._metrics.record_queue_wait(
            work.tier, (dispatched_at - int(work.request["created_at_ms"])) / 1000
        )
        model = self._model_for(work)
        remaining_s = (work.expire_at_ms - dispatched_at) / 1000
        timeout_s = max(0.001, min(self._settings.backend_timeout_s, remaining_s))
        try:
            completion = await self._backend.complete(
                model, work.request["messages"], work.request["params"], timeout_s=timeout_s
            )
        except BackendError as exc:
            result = self._outcomes.failed(
                work.request, model, str(exc), dispatched_at_ms=dispatched_at, now_ms=self._clock_ms()
            )
        else:
            result = self._outcomes.ok(
                work.request, completion, dispatched_at_ms=dispatched_at, now_ms=self._clock_ms()
            )
        finally:
            self._budget.release(work.tier)
            # A token came free: start the next request now, not at the next fetch.
            self._start_ready()
        await self._emit(work, result)

    async def _expire(self, work: Work) -> None:
        await self._emit(
            work, self._outcomes.expired(work.request, self._model_for(work), now_ms=self._clock_ms())
        )

    async def _emit(self, work: Work, result: dict[str, Any]) -> None:
        topic = work.request.get("reply_to") or self._topics.results
        await self._producer.produce(topic, self._results.encode(result), key=work.request_id.encode())
        self._metrics.record_outcome(work.tier, result)
        work.done()

    async def _dead_letter(
        self, tp: TopicPartition, offset: int, raw: bytes, reason: str, complete: Callable[[int], None]
    ) -> None:
        headers: list[tuple[str, str | bytes | None]] = [
            ("inferq.error", reason.encode()),
            ("inferq.source.topic", tp.topic.encode()),
            ("inferq.source.partition", str(tp.partition).encode()),
            ("inferq.source.offset", str(offset).encode()),
        ]
        await self._producer.produce(self._topics.dlq, raw, headers=headers)
        log.warning("poison record %s[%d]@%d dead-lettered: %s", tp.topic, tp.partition, offset, reason)
        self._metrics.record_dead_letter(tp.topic)
        complete(offset)

    # -- offsets ------------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.commit_interval_s)
            await self._commit_now()

    async def _commit_now(self, only: list[TopicPartition] | None = None) -> None:
        wanted = {(tp.topic, tp.partition) for tp in only} if only is not None else None
        commits: dict[TopicPartition, int] = {}
        states = []
        for state in self._offsets.owned():
            if wanted is not None and (state.topic, state.partition) not in wanted:
                continue
            position = state.take_commit()
            if position is not None:
                commits[TopicPartition(state.topic, state.partition)] = position
                states.append((state, position))
        if not commits:
            return
        await self._consumer.commit(commits)
        for state, position in states:
            state.mark_committed(position)

    async def _on_revoked(self, revoked: list[TopicPartition]) -> None:
        await self._commit_now(only=revoked)
        gone = {(tp.topic, tp.partition) for tp in revoked}
        for tier, queue in self._waiting.items():
            self._waiting[tier] = deque(
                w for w in queue if (w.offsets.topic, w.offsets.partition) not in gone
            )
        for tp in revoked:
            self._offsets.revoke(tp.topic, tp.partition)
        log.info("partitions revoked: %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in revoked))

    async def _on_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            self._offsets.assign(tp.topic, tp.partition)
        log.info("partitions assigned: %s", sorted(f"{tp.topic}[{tp.partition}]" for tp in assigned))


def _decode_request(codec: AvroCodec, raw: bytes) -> dict[str, Any]:
    """A request ready to run, or `DecodeError` for a record no retry can fix (a poison record)."""
    request = codec.decode(raw)
    request["params"] = _params(request)
    if not request["messages"]:
        raise DecodeError("messages is empty: nothing to send to the LLM", raw_size=len(raw))
    return request


def _params(request: dict[str, Any]) -> dict[str, Any]:
    """Chat-completions parameters, JSON-decoded; raises `DecodeError` for a value that is not JSON."""
    raw = request.get("params") or {}
    try:
        return {k: json.loads(v) for k, v in raw.items()}
    except ValueError as exc:
        raise DecodeError(f"params is not a map of JSON values: {exc}", raw_size=0) from exc
