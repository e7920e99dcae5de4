"""The chunk topics beside one results replica's reply topics, read from a point in time
(`KafkaChunkFeed`, for `chunk_reader.ChunkReader`).

No group, like the replica's reader of results (`feed`): every partition is this process's and
nothing is committed, since chunks are transient and read only for the event streams open here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaConsumer

from inferq.messaging.records import ReplyRecord
from inferq.messaging.reply_reader import reply_consumer, start_assigned
from inferq.results.settings import ResultsSettings


class KafkaChunkFeed:
    """`ChunkFeed` over aiokafka (`inferq.messaging.reply_reader`): every partition of the chunk
    topic beside each of `settings`' reply topics (`TopicNames.chunks_for`; every chunk topic, by
    `chunks_pattern`, for a service of all regions), each positioned at the first record written
    at or after `from_ms`, or at its end when there is none. A partition assigned later (a regional
    topic found by pattern) is read from its end."""

    def __init__(
        self, settings: ResultsSettings, from_ms: int, *, client_id: str = "inferq-results-chunks"
    ) -> None:
        self._settings = settings
        self._from_ms = from_ms
        self._client_id = client_id
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        names = self._settings.kafka.topics
        consumer = reply_consumer(
            self._settings.kafka,
            [names.chunks_for(topic) for topic in self._settings.reply_topics],
            client_id=self._client_id,
            pattern=names.chunks_pattern if self._settings.all_regions else None,
            # Only what streams open here may still want: never a topic's whole 15 minutes.
            start="latest",
        )
        await start_assigned(consumer, self._position)
        self._consumer = consumer

    async def _position(self, consumer: AIOKafkaConsumer) -> None:
        partitions = consumer.assignment()
        # Each end resolved now: a record written after the start returns is read.
        for tp in partitions:
            await consumer.position(tp)
        found = await consumer.offsets_for_times(dict.fromkeys(partitions, self._from_ms))
        for tp in partitions:
            # None: nothing written there since `from_ms`; reading stays at the end.
            if (at := found.get(tp)) is not None:
                consumer.seek(tp, at.offset)

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Mapping[object, Sequence[ReplyRecord]]:
        if self._consumer is None:
            raise RuntimeError("chunk feed not started")
        batches: Mapping[object, Sequence[ReplyRecord]] = await self._consumer.getmany(
            timeout_ms=timeout_ms, max_records=max_records
        )
        return batches
