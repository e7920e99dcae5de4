"""The dispatcher's Kafka edge: one aiokafka consumer over the tier topics.

aiokafka keeps every step on the event loop: rebalance callbacks are coroutines awaited inside the
rebalance, so a revoked partition's offsets are committed before another member can take it, with
no cross-thread hand-off. Pausing is desired state: the set of tiers to hold back is re-applied on
every assignment, because aiokafka forgets pauses across rebalances.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord

from services.messaging.kafka_config import KafkaSettings
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
        self._paused_tiers: set[Tier] = set()

    async def start(self, on_revoked: PartitionsHook, on_assigned: PartitionsHook) -> None:
        async def assigned(parts: list[TopicPartition]) -> None:
            self._apply_pauses()
            await on_assigned(parts)

        self._consumer.subscribe(self._topics.all_requests, listener=_Listener(on_revoked, assigned))
        await self._consumer.start()

    async def stop(self) -> None:
        # Leaves the group, so the partitions move to another member at once.
        await self._consumer.stop()

    def tier_of(self, tp: TopicPartition) -> Tier:
        tier = self._topics.tier_of(tp.topic)
        if tier is None:
            raise ValueError(f"not a request topic: {tp.topic}")
        return tier

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
            position = await asyncio.wait_for(self._consumer.position(tp), timeout_s)
            lags[tier] += max(0, ends[tp] - position)
            owned_count[tier] += 1
        result: dict[Tier, tuple[int, float]] = {}
        for tier in Tier:
            total = len(self._consumer.partitions_for_topic(self._topics.requests(tier)) or ())
            result[tier] = (lags[tier], owned_count[tier] / total if total else 0.0)
        return result

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch `tp` again from `offset` (records past the read-ahead bound are given back)."""
        self._consumer.seek(tp, offset)

    def set_paused(self, tiers: set[Tier]) -> None:
        """Desired state: exactly these tiers are paused (applied now and after every rebalance)."""
        if tiers != self._paused_tiers:
            self._paused_tiers = set(tiers)
            self._apply_pauses()

    @property
    def paused_tiers(self) -> set[Tier]:
        return set(self._paused_tiers)

    def paused_partition_count(self) -> int:
        return len(self._consumer.paused())

    def _apply_pauses(self) -> None:
        owned = self._consumer.assignment()
        pause = [tp for tp in owned if self._topics.tier_of(tp.topic) in self._paused_tiers]
        resume = [tp for tp in owned if tp not in pause]
        if pause:
            self._consumer.pause(*pause)
        if resume:
            self._consumer.resume(*resume)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if offsets:
            await self._consumer.commit(offsets)
