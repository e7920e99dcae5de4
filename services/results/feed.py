"""The reply topics as one results replica reads them: every partition, no consumer group, each
partition resumed where this replica's store left off (`KafkaResultFeed`).

No group, because every replica keeps the whole table: a group would split the partitions between
replicas (each would then know only its own share, and answer 404 for the rest). With no group
nothing is committed to Kafka either: the positions live in the replica's own database, written
with the results (`ResultsTable.put_many`), so they can never run ahead of what is stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from inferq.messaging.records import ReplyRecord
from inferq.messaging.reply_positions import ReplyPartition
from inferq.results.consumer import FeedPartition
from inferq.results.settings import ResultsSettings

# With `--region all`, how soon a regional reply topic created later is found and read.
PATTERN_METADATA_MAX_AGE_MS = 30_000
# Bound of the start: the topics' partitions assigned from the metadata.
ASSIGNED_TIMEOUT_S = 30.0


class KafkaResultFeed:
    """`ResultFeed` over aiokafka. `positions` reads the store's positions (the next offset per
    partition) once, at start; a partition without one is read from its beginning (a new replica
    fills its table from what the topic still holds). A partition assigned later (a regional topic
    found by pattern) is positioned the same way before its first fetch."""

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
        self._positioned: set[TopicPartition] = set()
        # Each partition's end when the feed started: reaching them all is being caught up.
        self._ends: dict[TopicPartition, int] = {}
        self._caught_up = False

    async def start(self) -> None:
        by_pattern = self._settings.all_regions
        consumer = AIOKafkaConsumer(
            *([] if by_pattern else self._settings.reply_topics),
            **self._settings.kafka.aiokafka_config(),
            client_id=self._client_id,
            # No group: every partition is this replica's, and nothing is committed to Kafka.
            group_id=None,
            enable_auto_commit=False,
            # A partition with no stored position (a new replica, a new topic) is read from its start;
            # so is one whose stored position fell out of the topic's retention.
            auto_offset_reset="earliest",
            # The broker holds a fetch that finds nothing new for at most 50 ms (aiokafka's default: 500).
            fetch_max_wait_ms=50,
            # A pattern is matched against the topics of each metadata refresh (default every 5 min).
            **({"metadata_max_age_ms": PATTERN_METADATA_MAX_AGE_MS} if by_pattern else {}),
        )
        if by_pattern:
            consumer.subscribe(pattern=self._settings.kafka.topics.results_pattern)
        try:
            await consumer.start()
            self._stored = dict(await self._positions())
            async with asyncio.timeout(ASSIGNED_TIMEOUT_S):
                # aiokafka assigns a group-less subscription from its metadata, with no event to await.
                while not consumer.assignment():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            self._position_new(consumer)
            assigned = list(consumer.assignment())
            self._ends = dict(await consumer.end_offsets(assigned))
        except BaseException:
            # A start that failed (or was cancelled) leaves nothing open.
            await consumer.stop()
            raise
        self._consumer = consumer

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> Mapping[FeedPartition, Sequence[ReplyRecord]]:
        consumer = self._running()
        self._position_new(consumer)
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

    def _position_new(self, consumer: AIOKafkaConsumer) -> None:
        for tp in consumer.assignment() - self._positioned:
            stored = self._stored.get(ReplyPartition(tp.topic, tp.partition))
            if stored is not None:
                consumer.seek(tp, stored)
            self._positioned.add(tp)

    def _running(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("result feed not started")
        return self._consumer
