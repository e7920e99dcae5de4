"""The dispatcher's Kafka edge: one aiokafka consumer over the tier topics.

aiokafka keeps every step on the event loop: rebalance callbacks are coroutines awaited inside the
rebalance, so a revoked partition's offsets are committed before another member can take it, with
no cross-thread hand-off. Pausing is desired state: the set of tiers to hold back is re-applied on
every assignment, because aiokafka forgets pauses across rebalances.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition

from services.dispatcher.offsets import parse_metadata
from services.messaging.kafka_config import KafkaSettings
from services.messaging.lag import partition_lag
from services.messaging.tiers import Tier
from services.messaging.topics import TopicNames

log = logging.getLogger("inferq.dispatcher.consumer")

PartitionsHook = Callable[[list[TopicPartition]], Awaitable[None]]


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, on_revoked: PartitionsHook, on_assigned: PartitionsHook) -> None:
        self._on_revoked = on_revoked
        self._on_assigned = on_assigned

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._on_assigned(list(assigned))


class TierConsumer:
    """Consumes the three request topics; pauses and resumes whole tiers on request."""

    def __init__(self, kafka: KafkaSettings, group_id: str, client_id: str) -> None:
        self._topics: TopicNames = kafka.topics
        self._consumer = AIOKafkaConsumer(
            **kafka.aiokafka_config(),
            group_id=group_id,
            client_id=client_id,
            # Offsets are committed only after an outcome is durably written (see offsets.py).
            enable_auto_commit=False,
            # A new group starts at the beginning: requests written before it existed are still owed.
            auto_offset_reset="earliest",
            # Small fetches: the backlog belongs in Kafka, not in this process.
            max_partition_fetch_bytes=256 * 1024,
            fetch_max_bytes=4 * 1024 * 1024,
            # Return a fetch as soon as one record is there; chat must not wait for a batch to fill.
            fetch_max_wait_ms=100,
            # Fewer than this many seconds between polls would mean the loop is stuck, not busy.
            max_poll_interval_ms=300_000,
        )
        # Reads the group's commits (with their metadata); never subscribes, never commits.
        self._commit_reader = Consumer(
            kafka.admin_config()
            | {"group.id": group_id, "client.id": f"{client_id}-commits", "enable.auto.commit": False}
        )
        self._paused_tiers: set[Tier] = set()
        self._retry_paused = False
        # Retry partitions held back until their head record's not-before time (monotonic seconds).
        self._held_back: dict[TopicPartition, float] = {}

    async def start(self, on_revoked: PartitionsHook, on_assigned: PartitionsHook) -> None:
        async def assigned(parts: list[TopicPartition]) -> None:
            self._apply_pauses()
            await on_assigned(parts)

        topics = [*self._topics.all_requests, self._topics.retry]
        self._consumer.subscribe(topics, listener=_Listener(on_revoked, assigned))
        await self._consumer.start()

    async def stop(self) -> None:
        # Leaves the group, so the partitions move to another member at once.
        await self._consumer.stop()
        await asyncio.to_thread(self._commit_reader.close)

    def tier_of(self, tp: TopicPartition) -> Tier | None:
        """The tier of a request topic's partition; None for the retry topic (tier is per record)."""
        return self._topics.tier_of(tp.topic)

    def is_retry(self, tp: TopicPartition) -> bool:
        return bool(tp.topic == self._topics.retry)

    async def fetch(
        self, max_records: int, timeout_ms: int
    ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        result: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = await self._consumer.getmany(
            timeout_ms=timeout_ms, max_records=max_records
        )
        return result

    async def lag_by_tier(self, timeout_s: float = 2.0) -> dict[Tier, tuple[int, float]]:
        """Per tier: records not yet fetched from the partitions this member owns, and the share of the
        tier's partitions it owns (so a group member compares its lag with its share of a capacity)."""
        owned = list(self._consumer.assignment())
        if not owned:
            return {}
        ends = await asyncio.wait_for(self._consumer.end_offsets(owned), timeout_s)
        lags: dict[Tier, int] = dict.fromkeys(Tier, 0)
        owned_count: dict[Tier, int] = dict.fromkeys(Tier, 0)
        for tp in owned:
            tier = self.tier_of(tp)
            if tier is None:
                continue
            position = await asyncio.wait_for(self._consumer.position(tp), timeout_s)
            lags[tier] += partition_lag(high=ends[tp], low=0, committed=position)
            owned_count[tier] += 1
        result: dict[Tier, tuple[int, float]] = {}
        for tier in Tier:
            total = len(self._consumer.partitions_for_topic(self._topics.requests(tier)) or ())
            result[tier] = (lags[tier], owned_count[tier] / total if total else 0.0)
        return result

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch `tp` again from `offset` (records past the read-ahead bound are given back)."""
        self._consumer.seek(tp, offset)

    def set_paused(self, tiers: set[Tier], *, retries: bool = False) -> None:
        """Desired state: exactly these tiers (and the retry topic if `retries`) are paused; applied
        now and after every rebalance."""
        if tiers != self._paused_tiers or retries != self._retry_paused:
            self._paused_tiers = set(tiers)
            self._retry_paused = retries
            self._apply_pauses()

    def hold_back(self, tp: TopicPartition, until_monotonic: float) -> None:
        """Pause a retry partition until its head record is due."""
        self._held_back[tp] = until_monotonic
        self._apply_pauses()

    def release(self, tp: TopicPartition) -> None:
        self._held_back.pop(tp, None)
        self._apply_pauses()

    def paused_partition_count(self) -> int:
        return len(self._consumer.paused())

    def _apply_pauses(self) -> None:
        owned = self._consumer.assignment()
        now = time.monotonic()
        for tp in [tp for tp, until in self._held_back.items() if until <= now or tp not in owned]:
            del self._held_back[tp]
        pause = [
            tp
            for tp in owned
            if self._topics.tier_of(tp.topic) in self._paused_tiers
            or (self.is_retry(tp) and (self._retry_paused or tp in self._held_back))
        ]
        resume = [tp for tp in owned if tp not in pause]
        if pause:
            self._consumer.pause(*pause)
        if resume:
            self._consumer.resume(*resume)

    async def done_beyond_commit(self, parts: list[TopicPartition]) -> dict[TopicPartition, set[int]]:
        """Per partition, the offsets completed beyond the group's commit (from its metadata).

        Read with a librdkafka consumer that never subscribes (so it never joins the group): its
        `committed()` returns the commit metadata, which aiokafka's public API does not. Not the
        admin client's offset listing: librdkafka 2.16 aborts the process when that request meets
        "not coordinator" while a broker loads its groups. Bounded; on failure nothing is skipped,
        so work is redone, not lost.
        """
        if not parts:
            return {}
        wanted = [KTopicPartition(tp.topic, tp.partition) for tp in parts]
        try:
            listing = await asyncio.wait_for(
                asyncio.to_thread(self._commit_reader.committed, wanted, 5.0), 6.0
            )
        except (KafkaException, TimeoutError) as exc:
            log.warning("commit metadata unreadable, completed work may be redone: %s", exc)
            return {}
        done: dict[TopicPartition, set[int]] = {}
        for entry in listing:
            if entry.offset >= 0 and entry.metadata:
                offsets = parse_metadata(entry.metadata, entry.offset)
                if offsets:
                    done[TopicPartition(entry.topic, entry.partition)] = offsets
        return done

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str]]) -> None:
        if offsets:
            await self._consumer.commit(offsets)
