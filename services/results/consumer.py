"""Reads the reply topics into the result store: every partition, no consumer group, resuming from
the positions stored with the results.

Every results replica holds every result (so any replica answers any request), so each reads all
of the reply topic's partitions itself (`feed.KafkaResultFeed`) and nothing is committed to Kafka:
how far each partition was read is saved in the same SQLite transaction as the batch
(`ResultsTable.put_many(positions=...)`), so a restarted replica resumes exactly after what it
stored, and a record below a stored position (read again) is passed over. Which replica sends a
partition's webhooks is decided elsewhere (`ownership`). aiokafka is the consumer here: this
service is one event loop that both serves HTTP and consumes, its volume is modest, and an async
consumer needs no thread hand-off.

This is the service's one reader of the reply topics: it also wakes the callers waiting in the
`inferq.delivery` hub. A result wakes them once it is stored, so a woken long poll finds it in the
store. A streamed answer's chunks share the topic (header ``inferq-kind: chunk``,
`inferq.messaging.records.is_chunk`); they are not results, neither stored nor counted as poison,
but those written since the reader started (`ResultFeed.live_from`) go to the hub for the event
streams. Older ones, read while a new replica catches up, are passed over undecoded: no caller
waits on this replica for a stream's past beyond what the hub kept since it started.

Chunks are most of the topic's records and few are followed here (chat callers are answered by
ingest's own follower), so they cost as little as they can: a chunk is decoded only when an event
stream follows its request (`WaiterHub.follows`, by the record's key, the request_id); the others
are kept undecoded for a late joiner (`WaiterHub.keep_undecoded`). A batch of chunks alone is not
stored: how far it was read is saved with the next batch that holds a result (or poison), so the
store's positions may lag behind chunks only, which a restart reads past undecoded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from opentelemetry.metrics import Meter
from opentelemetry.trace import Span

from inferq import tracing
from inferq.clock import wall_ms
from inferq.delivery.hub import WaiterHub
from inferq.messaging.codec import TypedCodec
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import InferenceResult, ReplyRecord, is_chunk
from inferq.messaging.reply_positions import ReplyPartition, ReplySource
from inferq.messaging.reply_reader import (
    FETCH_TIMEOUT_MS,
    MAX_BATCH_RECORDS,
    STOP_TIMEOUT_S,
    ReplyDecoder,
    read_replies,
)
from inferq.results.store import ResultStore
from inferq.supervised import SupervisedTask

log = logging.getLogger("inferq.results")


class FeedPartition(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


class ResultFeed(Protocol):
    """The reply topics as the consumer sees them (`feed.KafkaResultFeed`): `start` positions every
    partition where the store left off; `caught_up` says whether everything written before the
    start has been handed out; `live_from` is the first offset of a partition written since the
    feed started reading it (its end then)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> Mapping[FeedPartition, Sequence[ReplyRecord]]: ...

    async def caught_up(self) -> bool: ...

    def live_from(self, partition: FeedPartition) -> int: ...


class ResultsMetrics:
    """The consumer's counters: `inferq_results_stored_total` (first results stored),
    `inferq_results_duplicates_total` (dropped repeats), `inferq_results_undecodable_total` (poison);
    and `inferq_result_delivery_delay_seconds{tier}`, outcome written to result stored."""

    def __init__(self, meter: Meter) -> None:
        self._stored = meter.create_counter("inferq_results_stored_total", description="first results stored")
        self._duplicates = meter.create_counter(
            "inferq_results_duplicates_total", description="repeated results for a request_id, dropped"
        )
        self._undecodable = meter.create_counter(
            "inferq_results_undecodable_total", description="poison results"
        )
        self._delivery = meter.create_histogram(
            "inferq_result_delivery_delay_seconds",
            unit="s",
            description="from the dispatcher's outcome (completed_at) to the result stored here, by tier",
        )

    def batch_stored(self, stored: int, duplicates: int) -> None:
        self._stored.add(stored)
        self._duplicates.add(duplicates)

    def delivered(self, results: Sequence[InferenceResult], now_ms: int) -> None:
        """The delay of each result read, from its completion to now (clocks apart may make it
        negative: counted as 0)."""
        for result in results:
            delay_s = max(0.0, (now_ms - result.completed_at_ms) / 1000)
            self._delivery.record(delay_s, {"tier": result.tier.value})

    def undecodable(self) -> None:
        self._undecodable.add(1)


class ResultConsumer:
    """Runs `feed` into `store` in one task: fetch a batch, decode, store it with the positions read,
    then wake `hub`'s waiters with the results stored (chunks written since the start go to `hub`
    as they are read, before the batch is stored).

    The feed is made by `make_feed` when the consumer starts (aiokafka binds its clients to the
    running loop). `ready` is set once the feed has handed out everything written before it
    started (a replica starting on an empty store answers 404 for nothing it will soon know).
    A Kafka error (a failed start too) pauses a second and reading goes on
    (`inferq.messaging.reply_reader.read_replies`): results are owed to their callers. Any other
    error ends the task: it is logged, and `failed` turns true (``/healthz`` answers 503). Start
    and stop are idempotent. Without a `hub`, chunks are passed over undecoded.
    """

    def __init__(
        self,
        make_feed: Callable[[], ResultFeed],
        store: ResultStore,
        codec: TypedCodec[InferenceResult],
        metrics: ResultsMetrics,
        *,
        hub: WaiterHub | None = None,
    ) -> None:
        self._make_feed = make_feed
        self._hub = hub
        self._store = store
        self._decoder = ReplyDecoder(results=codec)
        self._metrics = metrics
        # The next offset to store per partition, as the store has it (loaded when the task starts).
        self._positions: dict[ReplyPartition, int] = {}
        # How far batches of chunks alone were read: saved with the next batch that is stored.
        self._unsaved: dict[ReplyPartition, int] = {}
        self._task = SupervisedTask(
            "results-consumer",
            ended="results consumer stopped; /healthz answers 503",
            stop_timeout_s=STOP_TIMEOUT_S,
            log=log,
        )
        self.ready = asyncio.Event()
        # Chunks handed to the hub (written since the start) and the ones among them that did not decode.
        self.chunks = 0
        self.undecodable_chunks = 0
        # Chunks nobody followed when they were read, kept for late joiners without decoding.
        self.kept_undecoded = 0

    @property
    def failed(self) -> bool:
        """Whether the consuming task ended by itself (an error it could not go on after)."""
        return self._task.failed

    async def start(self) -> None:
        if not self._task.started:
            self._task.start(self._run(self._make_feed()))

    async def stop(self) -> None:
        """Cancel the task (a batch being stored is finished by the store's worker, not committed)."""
        await self._task.stop()

    async def _run(self, feed: ResultFeed) -> None:
        self._positions = await self._store.positions()

        async def fetch_once() -> None:
            await self.consume_once(feed)
            if not self.ready.is_set() and await feed.caught_up():
                self.ready.set()

        await read_replies(feed, fetch_once, log=log)

    async def consume_once(self, feed: ResultFeed) -> None:
        """One fetch: decode what decodes (poison is counted and logged), store it with how far each
        partition was read (records below a stored position were stored already: passed over). A
        fetch of chunks alone is not stored: its positions wait for the next stored batch."""
        batches = await feed.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=MAX_BATCH_RECORDS)
        if not batches:
            return
        hub = self._hub
        decoded: list[InferenceResult] = []
        sources: list[ReplySource] = []
        read_up_to: dict[ReplyPartition, int] = {}
        # Whether a record besides chunks (a result, poison) was read: only then is the batch stored.
        outcomes = False
        # Per record, when tracing is on: its process span, ended once the batch is stored.
        spans: list[tuple[Span, str]] = []
        for tp, records in batches.items():
            where = ReplyPartition(tp.topic, tp.partition)
            stored_up_to = self._positions.get(where, 0)
            # Chunks below it were written before the feed started: no caller here waits for them.
            live_from = feed.live_from(tp) if hub is not None else 0
            for record in records:
                if record.offset < stored_up_to:
                    continue
                read_up_to[where] = record.offset + 1
                if is_chunk(list(record.headers or ())):
                    if hub is not None and record.offset >= live_from:
                        self._chunk(record, hub)
                    continue
                outcomes = True
                span = tracing.start_process(
                    tp.topic, tp.partition, record.offset, tracing.extract(record.headers)
                )
                try:
                    result = self._decoder.result(record)
                except DecodeError as exc:
                    tracing.end_process(span, error="undecodable")
                    self._metrics.undecodable()
                    log.error(  # noqa: TRY400 - the traceback adds nothing to the reason
                        "undecodable result %s[%d]@%d skipped: %s",
                        tp.topic,
                        tp.partition,
                        record.offset,
                        _loggable(exc),
                    )
                    continue
                decoded.append(result)
                sources.append(ReplySource(tp.topic, tp.partition, record.offset))
                if span is not None:
                    spans.append((span, result.request_id))
        if not outcomes:
            self._unsaved.update(read_up_to)
            return
        positions = self._unsaved | read_up_to
        stored, duplicates = await self._store.put_many(decoded, sources=sources, positions=positions)
        self._unsaved.clear()
        self._positions.update(positions)
        for span, request_id in spans:
            tracing.end_process(span, message_id=request_id)
        self._metrics.batch_stored(stored, duplicates)
        if hub is not None:
            # Stored first: a long poll woken now reads the result from the store.
            for result in decoded:
                hub.publish_result(result)
        self._metrics.delivered(decoded, wall_ms())

    def _chunk(self, record: ReplyRecord, hub: WaiterHub) -> None:
        """A chunk written since the start, to the hub for the event streams (not stored): decoded
        when its request is followed (or its record has no key to tell), else kept undecoded."""
        if record.key is not None and record.value is not None:
            request_id = record.key.decode("utf-8", "replace")
            if not hub.follows(request_id):
                self.kept_undecoded += 1
                hub.keep_undecoded(request_id, record.value)
                return
        try:
            chunk = self._decoder.chunk(record)
        except DecodeError as exc:
            # Not a result either: not the results' poison; counted and skipped.
            self.undecodable_chunks += 1
            log.debug("undecodable chunk at offset %d skipped: %s", record.offset, type(exc).__name__)
            return
        self.chunks += 1
        hub.publish_chunk(chunk)

    def position(self, where: ReplyPartition) -> int | None:
        """The next offset of `where` to store (None: nothing read there yet)."""
        return self._positions.get(where)


def _loggable(exc: DecodeError) -> str:
    """Why a record did not decode, without quoting it: the codec's message for a wrapped error may
    repr the value (a model's output), so only the wrapped error's kind is logged."""
    if exc.__cause__ is None:
        return str(exc)
    return f"cannot decode record ({exc.raw_size} bytes): {type(exc.__cause__).__name__}"
