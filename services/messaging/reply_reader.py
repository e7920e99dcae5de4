"""Group-less readers of the reply topics: one shape for both of them, ingest's follower
(`inferq.delivery.follower`, every partition from its end) and the results service's reader
(`inferq.results.feed`, every partition from the positions stored with the results).

- `reply_consumer`: the aiokafka consumer: no group (every partition is this process's, nothing is
  committed), the topics named or every topic matching a pattern (a reply topic created later is
  found at a metadata refresh);
- `start_assigned`: started and its partitions assigned, within a bound, or stopped again;
- `read_replies`: the run loop: a start that fails on Kafka is retried every second, then one fetch
  after another, a Kafka error pausing a second (outcomes are owed to callers: a broker outage must
  not end reading); any other error ends it; the consumer is stopped on the way out;
- `ReplyDecoder`: a record as a chunk (`records.is_chunk` of its headers) or a result; one that does
  not decode raises `DecodeError` and is counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol, TypeVar

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from inferq.messaging.codec import TypedCodec, chunk_codec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceChunk, InferenceResult, ReplyRecord, is_chunk

# One fetch waits at most this long for records to arrive.
FETCH_TIMEOUT_MS = 200
# One fetch hands out at most this many records (the results reader stores them in one transaction).
MAX_BATCH_RECORDS = 1_000
RETRY_PAUSE_S = 1.0
STOP_TIMEOUT_S = 10.0
# Bound of a start: the topics' partitions assigned from the metadata.
ASSIGNED_TIMEOUT_S = 30.0
# Reading by pattern: how soon a reply topic created later is found and read (default every 5 min).
PATTERN_METADATA_MAX_AGE_MS = 30_000
# The broker holds a fetch that finds nothing new for at most this (aiokafka's default: 500 ms); a
# record written meanwhile answers the held fetch at once, so this bounds idle fetches, not wake-ups.
FETCH_MAX_WAIT_MS = 50

Start = Literal["latest", "earliest"]
T = TypeVar("T")


def reply_consumer(
    kafka: KafkaSettings,
    topics: str | Sequence[str],
    *,
    client_id: str,
    pattern: str | None = None,
    start: Start,
) -> AIOKafkaConsumer:
    """A group-less consumer of `topics` (or, with `pattern`, of every topic matching it). `start`
    is where a partition with no position is read from: ``latest`` for a follower that owes its
    callers only what is written from now on, ``earliest`` for a reader that fills a store."""
    named = [topics] if isinstance(topics, str) else list(topics)
    consumer = AIOKafkaConsumer(
        *([] if pattern else named),
        **kafka.aiokafka_config(),
        client_id=client_id,
        # No group: every partition is ours, nothing is committed to Kafka.
        group_id=None,
        enable_auto_commit=False,
        # Where a partition with no position (or one fallen out of retention) is read from.
        auto_offset_reset=start,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        # A pattern is matched at each metadata refresh: a reply topic created later is found.
        **({"metadata_max_age_ms": PATTERN_METADATA_MAX_AGE_MS} if pattern else {}),
    )
    if pattern:
        consumer.subscribe(pattern=pattern)
    return consumer


async def start_assigned(
    consumer: AIOKafkaConsumer, position: Callable[[AIOKafkaConsumer], Awaitable[None]] | None = None
) -> None:
    """Start `consumer`, wait (at most `ASSIGNED_TIMEOUT_S`, else `TimeoutError`) until it holds its
    partitions, then let `position` place it; a start or a positioning that fails (or is
    cancelled) stops it again, so nothing stays open."""
    try:
        await consumer.start()
        async with asyncio.timeout(ASSIGNED_TIMEOUT_S):
            # aiokafka assigns a group-less subscription from its metadata, with no event to await.
            while not consumer.assignment():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        if position is not None:
            await position(consumer)
    except BaseException:
        await consumer.stop()
        raise


class Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def read_replies(
    feed: Startable,
    fetch_once: Callable[[], Awaitable[None]],
    *,
    log: logging.Logger,
    started: Callable[[], None] | None = None,
) -> None:
    """Start `feed` (retried every `RETRY_PAUSE_S` while Kafka or the start's bound fails), call
    `started`, then `fetch_once` until cancelled: a `KafkaError` pauses `RETRY_PAUSE_S` and reading
    goes on, any other error propagates (its task fails). `feed` is stopped on the way out."""
    while True:
        try:
            await feed.start()
            break
        except (KafkaError, TimeoutError) as exc:
            log.error(  # noqa: TRY400 - a traceback per retry is noise
                "cannot read the reply topic yet, trying again in 1 s: %s", exc or type(exc).__name__
            )
            await asyncio.sleep(RETRY_PAUSE_S)
    try:
        if started is not None:
            started()
        while True:
            try:
                await fetch_once()
            except KafkaError as exc:
                log.error(  # noqa: TRY400 - a traceback per retry is noise
                    "reading the reply topic failed, trying again in 1 s: %s", exc
                )
                await asyncio.sleep(RETRY_PAUSE_S)
    finally:
        await feed.stop()


class ReplyDecoder:
    """Decodes reply records: `decode` tells a chunk by its kind header, else a result (`chunk` and
    `result` for a reader that already knows which). `undecodable` counts the records that raised
    `DecodeError` (poison: never worth a retry)."""

    def __init__(self, results: TypedCodec[InferenceResult] | None = None) -> None:
        self._results = results or result_codec()
        self._chunks = chunk_codec()
        self.undecodable = 0

    def decode(self, record: ReplyRecord) -> InferenceChunk | InferenceResult:
        return self.chunk(record) if is_chunk(list(record.headers or ())) else self.result(record)

    def chunk(self, record: ReplyRecord) -> InferenceChunk:
        return self._counted(self._chunks, record)

    def result(self, record: ReplyRecord) -> InferenceResult:
        return self._counted(self._results, record)

    def _counted(self, codec: TypedCodec[T], record: ReplyRecord) -> T:
        try:
            return codec.decode(record.value or b"")
        except DecodeError:
            self.undecodable += 1
            raise
