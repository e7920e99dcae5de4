"""The reply topics as one results replica reads them: every partition, no consumer group, each
partition resumed where this replica's store left off (`KafkaResultFeed`).

No group, because every replica keeps the whole table: a group would split the partitions between
replicas (each would then know only its own share, and answer 404 for the rest). With no group
nothing is committed to Kafka either: the positions live in the replica's own database, written
with the results (`ResultsTable.put_many`), so they can never run ahead of what is stored.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from inferq.messaging.records import ReplyRecord
from inferq.messaging.reply_positions import ReplyPartition
from inferq.messaging.reply_reader import reply_consumer, start_assigned
from inferq.results.consumer import FeedPartition
from inferq.results.settings import ResultsSettings


class KafkaResultFeed:
    """`ResultFeed` over aiokafka (`inferq.messaging.reply_reader`). `positions` reads the store's
    positions (the next offset per partition) once, at start; a partition without one is read from
    its beginning (a new replica fills its table from what the topic still holds). A partition
    assigned later (a regional topic found by pattern) is positioned the same way before its first
    fetch. Each partition's end when it was positioned is kept for `caught_up` (the partitions of
    the start all read up to theirs)."""

    def __init__(
        self,
        settings: ResultsSettings,
        positions: Callable[[], Awaitable[Mapping[ReplyPartition, int]]],
        *,
        client_id: str = "inferq-results",
    ) -> None:
        self._settings = settings
        self._positions = positions
        self._client_id = client_id
        self._consumer: AIOKafkaConsumer | None = None
        self._stored: dict[ReplyPartition, int] = {}
        # Each partition's end when it was positioned (the partitions positioned so far).
        self._positioned_ends: dict[TopicPartition, int] = {}
        # Each partition's end when the feed started: reaching them all is being caught up.
        self._ends: dict[TopicPartition, int] = {}
        self._caught_up = False

    async def start(self) -> None:
        by_pattern = self._settings.all_regions
        consumer = reply_consumer(
            self._settings.kafka,
            self._settings.reply_topics,
            client_id=self._client_id,
            pattern=self._settings.kafka.topics.results_pattern if by_pattern else None,
            # A partition with no stored position (a new replica, a new topic) is read from its
            # start; so is one whose stored position fell out of the topic's retention.
            start="earliest",
        )
        await start_assigned(consumer, self._position_first)
        self._consumer = consumer

    async def _position_first(self, consumer: AIOKafkaConsumer) -> None:
        self._stored = dict(await self._positions())
        await self._position_new(consumer)
        self._ends = {tp: self._positioned_ends[tp] for tp in consumer.assignment()}

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> Mapping[FeedPartition, Sequence[ReplyRecord]]:
        consumer = self._running()
        await self._position_new(consumer)
        batches: Mapping[FeedPartition, Sequence[ReplyRecord]] = await consumer.getmany(
            timeout_ms=timeout_ms, max_records=max_records
        )
        return batches

    async def caught_up(self) -> bool:
        """Whether every partition was read up to where it ended when the feed started."""
        if not self._caught_up:
            consumer = self._running()
            for tp, end in self._ends.items():
                if await consumer.position(tp) < end:
                    return False
            self._caught_up = True
        return True

    async def _position_new(self, consumer: AIOKafkaConsumer) -> None:
        new = list(consumer.assignment() - self._positioned_ends.keys())
        if not new:
            return
        # Ends first: a Kafka error here leaves the partitions to position at the next fetch.
        ends = await consumer.end_offsets(new)
        for tp in new:
            stored = self._stored.get(ReplyPartition(tp.topic, tp.partition))
            if stored is not None:
                consumer.seek(tp, stored)
            self._positioned_ends[tp] = ends[tp]

    def _running(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("result feed not started")
        return self._consumer
