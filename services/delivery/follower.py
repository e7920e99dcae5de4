"""Follows a reply topic and its chunk topic for the waiter hub: every partition, from the end, no
consumer group (ingest's sync and streamed chat callers, and the Kafka client; the results
service's reader wakes its hub itself: `inferq.results.consumer`).

Following needs no commits: a process that holds callers' connections only cares about outcomes
written while it runs (a result written before it started is in the results store). So the consumer
has no group (aiokafka assigns it every partition of the topic, new ones included) and starts at the
end of each partition; `ready` is set once each partition's position is known, so a request produced
after that is never missed. Each record is a chunk (`records.is_chunk` of its headers) or a result;
one that does not decode is counted and skipped. A chunk is decoded only when a waiter here follows
its request (`WaiterHub.follows`, by the record's key, the request_id): the chunk topic carries every
caller's chunks, most of them held by other processes. A Kafka error pauses a second and following goes on;
any other error ends the task (`failed`), which the service's health reports. The consumer, the
retry loop and the decoding are the reply topics' one shape (`inferq.messaging.reply_reader`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from aiokafka import AIOKafkaConsumer

from inferq.delivery.hub import WaiterHub
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceChunk, ReplyRecord, is_chunk
from inferq.messaging.reply_reader import (
    FETCH_TIMEOUT_MS,
    MAX_BATCH_RECORDS,
    STOP_TIMEOUT_S,
    ReplyDecoder,
    read_replies,
    reply_consumer,
    start_assigned,
)
from inferq.supervised import SupervisedTask

log = logging.getLogger("inferq.delivery")


class ReplyFeed(Protocol):
    """The reply topic as the follower reads it; `start` returns once reading starts at the end."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> Mapping[object, Sequence[ReplyRecord]]: ...


def followed_topics(kafka: KafkaSettings, reply_topic: str) -> list[str]:
    """What a caller's process follows for `reply_topic`: it, and the chunk topic beside it."""
    return [reply_topic, kafka.topics.chunks_for(reply_topic)]


class KafkaReplyFeed:
    """`ReplyFeed` over aiokafka: no group, every partition of `topics` (for a caller's process,
    `followed_topics`; or of the topics matching `pattern`), positioned at the end, or at the first
    record written at or after `from_ms` (a client resuming a batch replays what it missed; a
    results replica's chunk reader replays the answers in progress)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topics: str | Sequence[str],
        *,
        client_id: str,
        pattern: str | None = None,
        from_ms: int | None = None,
    ) -> None:
        self._kafka = kafka
        self._topics = [topics] if isinstance(topics, str) else list(topics)
        self._pattern = pattern
        self._client_id = client_id
        self._from_ms = from_ms
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        consumer = reply_consumer(
            self._kafka,
            self._topics,
            client_id=self._client_id,
            pattern=self._pattern,
            # Only outcomes written from now on are owed to the callers this process holds.
            start="latest",
        )
        await start_assigned(consumer, self._position)
        self._consumer = consumer

    async def _position(self, consumer: AIOKafkaConsumer) -> None:
        # Resolving each position now (to the end) fixes where following starts: a record written
        # after the start returns is read.
        for tp in consumer.assignment():
            await consumer.position(tp)
        if self._from_ms is not None:
            partitions = consumer.assignment()
            found = await consumer.offsets_for_times(dict.fromkeys(partitions, self._from_ms))
            for tp in partitions:
                # None: nothing written since `from_ms` there; following stays at the end.
                if (at := found.get(tp)) is not None:
                    consumer.seek(tp, at.offset)

    async def stop(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Mapping[object, Sequence[ReplyRecord]]:
        if self._consumer is None:
            raise RuntimeError("reply feed not started")
        batches: Mapping[object, Sequence[ReplyRecord]] = await self._consumer.getmany(
            timeout_ms=timeout_ms, max_records=max_records
        )
        return batches


class ReplyFollower:
    """Runs `make_feed()` into `hub` in one task. `start` starts the task and returns; `ready` is
    set once the feed reads from the end (a feed that cannot start, Kafka being down, is retried
    every second meanwhile). `stop` is idempotent."""

    def __init__(self, make_feed: Callable[[], ReplyFeed], hub: WaiterHub) -> None:
        self._make_feed = make_feed
        self._hub = hub
        self._task = SupervisedTask(
            "reply-follower",
            ended="reply follower stopped; waiting callers get no more outcomes",
            stop_timeout_s=STOP_TIMEOUT_S,
            log=log,
        )
        self.ready = asyncio.Event()
        self._decoder = ReplyDecoder()
        self.records = 0

    @property
    def undecodable(self) -> int:
        """Records read that decoded neither as a chunk nor as a result."""
        return self._decoder.undecodable

    @property
    def failed(self) -> bool:
        """Whether the task ended by itself (an error it could not go on after)."""
        return self._task.failed

    async def start(self) -> None:
        if not self._task.started:
            self._task.start(self._run())

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        feed = self._make_feed()
        await read_replies(feed, lambda: self.follow_once(feed), log=log, started=self.ready.set)

    async def follow_once(self, feed: ReplyFeed) -> None:
        """One fetch: each record to the hub, chunks and results in the order read."""
        batches = await feed.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=MAX_BATCH_RECORDS)
        for records in batches.values():
            for record in records:
                self.records += 1
                self.deliver(record)

    def deliver(self, record: ReplyRecord) -> None:
        # A chunk nobody here follows is passed over undecoded (the hub keeps no history here).
        if is_chunk(record.headers) and self._hub.kept_unfollowed(record):
            return
        try:
            reply = self._decoder.decode(record)
        except DecodeError as exc:
            # The results service counts and logs poison on this topic; here it is only skipped.
            log.debug("undecodable reply record at offset %d skipped: %s", record.offset, type(exc).__name__)
            return
        if isinstance(reply, InferenceChunk):
            self._hub.publish_chunk(reply)
        else:
            self._hub.publish_result(reply)
