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
store. Chunks of streamed answers have topics of their own, read only while an event stream wants
them (`chunk_reader`); a chunk still found here (header ``inferq-kind: chunk``,
`inferq.messaging.records.is_chunk`: written by a dispatcher older than the chunk topics) is
passed over undecoded, neither stored nor counted as poison. A batch of such chunks alone is not
stored: how far it was read is saved with the next batch that holds a result (or poison).
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
    start has been handed out."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> Mapping[FeedPartition, Sequence[ReplyRecord]]: ...

    async def caught_up(self) -> bool: ...


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
    then wake `hub`'s waiters with the results stored.

    The feed is made by `make_feed` when the consumer starts (aiokafka binds its clients to the
    running loop). `ready` is set once the feed has handed out everything written before it
    started (a replica starting on an empty store answers 404 for nothing it will soon know).
    A Kafka error (a failed start too) pauses a second and reading goes on
    (`inferq.messaging.reply_reader.read_replies`): results are owed to their callers. Any other
    error ends the task: it is logged, and `failed` turns true (``/healthz`` answers 503). Start
    and stop are idempotent.
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
        # Chunks found on the reply topics (an older dispatcher's), passed over.
        self.chunks_passed_over = 0

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
        chunk is passed over; a fetch of chunks alone is not stored: its positions wait for the
        next stored batch."""
        batches = await feed.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=MAX_BATCH_RECORDS)
        if not batches:
            return
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
            for record in records:
                if record.offset < stored_up_to:
                    continue
                read_up_to[where] = record.offset + 1
                if is_chunk(list(record.headers or ())):
                    self.chunks_passed_over += 1
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
        if self._hub is not None:
            # Stored first: a long poll woken now reads the result from the store.
            for result in decoded:
                self._hub.publish_result(result)
        self._metrics.delivered(decoded, wall_ms())

    def position(self, where: ReplyPartition) -> int | None:
        """The next offset of `where` to store (None: nothing read there yet)."""
        return self._positions.get(where)


def _loggable(exc: DecodeError) -> str:
    """Why a record did not decode, without quoting it: the codec's message for a wrapped error may
    repr the value (a model's output), so only the wrapped error's kind is logged."""
    if exc.__cause__ is None:
        return str(exc)
    return f"cannot decode record ({exc.raw_size} bytes): {type(exc.__cause__).__name__}"
