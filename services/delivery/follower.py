"""Follows a reply topic for the waiter hub: every partition, from the end, no consumer group.

Following needs no commits: a process that holds callers' connections only cares about outcomes
written while it runs (a result written before it started is in the results store). So the consumer
has no group (aiokafka assigns it every partition of the topic, new ones included) and starts at the
end of each partition; `ready` is set once each partition's position is known, so a request produced
after that is never missed. Each record is a chunk (`records.is_chunk` of its headers) or a result;
one that does not decode is counted and skipped. A Kafka error pauses a second and following goes on;
any other error ends the task (`failed`), which the service's health reports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from inferq.delivery.hub import WaiterHub
from inferq.messaging.codec import chunk_codec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import ReplyRecord, is_chunk
from inferq.supervised import SupervisedTask

log = logging.getLogger("inferq.delivery")

FETCH_TIMEOUT_MS = 200
MAX_BATCH_RECORDS = 1_000
RETRY_PAUSE_S = 1.0
STOP_TIMEOUT_S = 10.0
# Bound of the start: the topic's partitions assigned and each position at the end resolved.
READY_TIMEOUT_S = 30.0
# Following by pattern: how soon a reply topic created later is followed.
PATTERN_METADATA_MAX_AGE_MS = 30_000


class ReplyFeed(Protocol):
    """The reply topic as the follower reads it; `start` returns once reading starts at the end."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> Mapping[object, Sequence[ReplyRecord]]: ...


class KafkaReplyFeed:
    """`ReplyFeed` over aiokafka: no group, every partition of `topics` (or of the topics matching
    `pattern`, the results service serving all regions), positioned at the end, or at the first
    record written at or after `from_ms` (a client resuming a batch replays what it missed)."""

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
        consumer = AIOKafkaConsumer(
            *([] if self._pattern else self._topics),
            **self._kafka.aiokafka_config(),
            client_id=self._client_id,
            # No group: every partition is ours, nothing is committed.
            group_id=None,
            enable_auto_commit=False,
            # Only outcomes written from now on are owed to the callers this process holds.
            auto_offset_reset="latest",
            # A waiting caller is woken within this of the record's write when the topic is quiet.
            fetch_max_wait_ms=20,
            # A pattern is matched at each metadata refresh: a reply topic created later is found.
            **({"metadata_max_age_ms": PATTERN_METADATA_MAX_AGE_MS} if self._pattern else {}),
        )
        if self._pattern:
            consumer.subscribe(pattern=self._pattern)
        try:
            await consumer.start()
            async with asyncio.timeout(READY_TIMEOUT_S):
                # aiokafka assigns a group-less subscription from its metadata, with no event to await.
                while not consumer.assignment():  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
                # Resolving each position now (to the end) fixes where following starts: a record
                # written after this returns is read.
                for tp in consumer.assignment():
                    await consumer.position(tp)
            if self._from_ms is not None:
                partitions = consumer.assignment()
                found = await consumer.offsets_for_times(dict.fromkeys(partitions, self._from_ms))
                for tp in partitions:
                    # None: nothing written since `from_ms` there; following stays at the end.
                    if (at := found.get(tp)) is not None:
                        consumer.seek(tp, at.offset)
        except BaseException:
            # A start that failed (or was cancelled) leaves nothing open.
            await consumer.stop()
            raise
        self._consumer = consumer

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
        self.undecodable = 0
        self.records = 0

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
        while True:
            try:
                await feed.start()
                break
            except (KafkaError, TimeoutError) as exc:
                log.error(  # noqa: TRY400 - a traceback per retry is noise
                    "cannot follow the reply topic yet, trying again in 1 s: %s", exc or type(exc).__name__
                )
                await asyncio.sleep(RETRY_PAUSE_S)
        self.ready.set()
        try:
            while True:
                try:
                    await self.follow_once(feed)
                except KafkaError as exc:
                    log.error(  # noqa: TRY400 - a traceback per retry is noise
                        "following the reply topic failed, trying again in 1 s: %s", exc
                    )
                    await asyncio.sleep(RETRY_PAUSE_S)
        finally:
            await feed.stop()

    async def follow_once(self, feed: ReplyFeed) -> None:
        """One fetch: each record to the hub, chunks and results in the order read."""
        batches = await feed.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=MAX_BATCH_RECORDS)
        for records in batches.values():
            for record in records:
                self.records += 1
                self.deliver(record)

    def deliver(self, record: ReplyRecord) -> None:
        value = record.value or b""
        try:
            if is_chunk(list(record.headers or ())):
                self._hub.publish_chunk(chunk_codec().decode(value))
            else:
                self._hub.publish_result(result_codec().decode(value))
        except DecodeError as exc:
            # The results service counts and logs poison on this topic; here it is only skipped.
            self.undecodable += 1
            log.debug("undecodable reply record at offset %d skipped: %s", record.offset, type(exc).__name__)
