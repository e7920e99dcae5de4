"""Reads the chunk topics for the results service's ``/events`` streams, and only while one is open.

Chunks are most of what the dispatcher writes, and almost no caller asks the results service for
them (chat callers are answered by ingest's follower), so this process reads them only while an
event stream wants them (`WaiterHub.following`): the reader starts when the first such stream
opens and stops once none has been open for `grace_s` (a client that reconnects within it finds the
reader running and the chunks since kept in the hub).

Each time it starts, every partition is read from the first record written `replay_s` ago (the
feed, `chunk_feed.kafka_chunk_feed`, positions it), so a stream opened mid-answer still gets the
answer from its start; while it runs, the hub keeps the chunks of streams in progress for those who
join later, and repeats are dropped by seq (`ChunkTracker`). A chunk is decoded only when a stream
follows its request (`WaiterHub.follows`, by the record's key, the request_id); the others are kept
undecoded in the hub's history (`WaiterHub.kept_unfollowed`). One that does not decode is counted and skipped.

Nothing waits for this reader: a stream's result comes from the store or the results reader
(`consumer.ResultConsumer`). So with Kafka down, or an answer that ends before the reader has caught
up, a stream gets the result (the whole text) without some chunks. Like the other reply readers it
outlives Kafka errors (`inferq.messaging.reply_reader.read_replies`); any other error ends it
(`failed`: ``/healthz`` answers 503).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from inferq.clock import wall_ms
from inferq.delivery.hub import WaiterHub
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import ReplyRecord
from inferq.messaging.reply_reader import (
    FETCH_TIMEOUT_MS,
    MAX_BATCH_RECORDS,
    STOP_TIMEOUT_S,
    ReplyDecoder,
    read_replies,
)
from inferq.supervised import SupervisedTask

log = logging.getLogger("inferq.results")


class ChunkFeed(Protocol):
    """The chunk topics as the reader sees them: `start` positions every partition (at the first
    record written at or after the time the feed was made for)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def getmany(
        self, *, timeout_ms: int, max_records: int
    ) -> Mapping[object, Sequence[ReplyRecord]]: ...


class ChunkReader:
    """Runs `make_feed(from_ms)` into `hub` while some waiter of `hub` wants chunks; `from_ms` is
    `replay_s` before the (re)start on `clock_ms`. `start` and `stop` (the service's lifespan) run
    the task that starts and stops the reading; both are idempotent. `running` says whether a feed
    is being read now; the counters say what became of the records read."""

    def __init__(
        self,
        make_feed: Callable[[int], ChunkFeed],
        hub: WaiterHub,
        *,
        replay_s: float,
        grace_s: float,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        if replay_s < 0 or grace_s < 0:
            raise ValueError("the chunk reader's replay and grace must be >= 0 s")
        self._make_feed = make_feed
        self._hub = hub
        self._replay_ms = round(replay_s * 1000)
        self._grace_s = grace_s
        self._clock_ms = clock_ms
        self._decoder = ReplyDecoder()
        # Exactly one is set: someone wants chunks, or nobody does.
        self._wanted = asyncio.Event()
        self._unwanted = asyncio.Event()
        self._following_changed()
        hub.watch_following(self._following_changed)
        self._task = SupervisedTask(
            "chunk-reader",
            ended="chunk reader stopped; /healthz answers 503",
            stop_timeout_s=STOP_TIMEOUT_S,
            log=log,
        )
        self.running = False
        # Times reading started; records read, and what became of them.
        self.starts = 0
        self.records = 0
        self.decoded = 0
        self.kept_undecoded = 0
        self.undecodable = 0

    @property
    def failed(self) -> bool:
        """Whether the reader's task ended by itself (an error it could not go on after)."""
        return self._task.failed

    async def start(self) -> None:
        if not self._task.started:
            self._task.start(self._serve())

    async def stop(self) -> None:
        """Stop reading (the feed is stopped) and the task."""
        await self._task.stop()

    def _following_changed(self) -> None:
        wanted = self._hub.following > 0
        (self._wanted if wanted else self._unwanted).set()
        (self._unwanted if wanted else self._wanted).clear()

    async def _serve(self) -> None:
        while True:
            await self._wanted.wait()
            await self._read_while_wanted()

    async def _read_while_wanted(self) -> None:
        """Read a feed from `replay_s` ago until nobody has wanted chunks for `grace_s` (or the
        reading fails: raised here)."""
        from_ms = self._clock_ms() - self._replay_ms
        feed = self._make_feed(from_ms)
        self.starts += 1
        reading = asyncio.create_task(
            read_replies(feed, functools.partial(self.read_once, feed), log=log, started=self._started),
            name="chunk-reader-feed",
        )
        idle = asyncio.create_task(self._idle_for_grace(), name="chunk-reader-idle")
        try:
            done, _ = await asyncio.wait({reading, idle}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Cancelled or done: the feed is stopped on `reading`'s way out.
            for task in (reading, idle):
                task.cancel()
            await asyncio.wait({reading, idle})
            self.running = False
        if reading in done:
            raise reading.exception() or RuntimeError("the chunk feed ended")
        log.info("no /events stream for %g s: chunk reader stopped", self._grace_s)

    def _started(self) -> None:
        self.running = True
        log.info("chunk reader started (from %g s back) for /events streams", self._replay_ms / 1000)

    async def _idle_for_grace(self) -> None:
        """Returns once nobody has wanted chunks for `grace_s` in a row."""
        while True:
            await self._unwanted.wait()
            try:
                async with asyncio.timeout(self._grace_s):
                    await self._wanted.wait()
            except TimeoutError:
                return

    async def read_once(self, feed: ChunkFeed) -> None:
        """One fetch, each record to the hub (`deliver`)."""
        batches = await feed.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=MAX_BATCH_RECORDS)
        for records in batches.values():
            for record in records:
                self.deliver(record)

    def deliver(self, record: ReplyRecord) -> None:
        """A chunk record to the hub: decoded when its request is followed (or its record has no
        key to tell), else kept undecoded for a late joiner."""
        self.records += 1
        if self._hub.kept_unfollowed(record):
            self.kept_undecoded += 1
            return
        try:
            chunk = self._decoder.chunk(record)
        except DecodeError as exc:
            self.undecodable += 1
            log.debug("undecodable chunk at offset %d skipped: %s", record.offset, type(exc).__name__)
            return
        self.decoded += 1
        self._hub.publish_chunk(chunk)


def watch_chunk_reader(meter: Meter, reader: ChunkReader) -> None:
    """`inferq_results_chunk_reader_running` (1 while the chunk topics are read) and
    `inferq_results_chunk_records_total{handling}` (``decoded``: a stream followed it; ``kept``: kept
    undecoded for a late joiner; ``undecodable``: skipped), read at each collection."""

    def running(_: CallbackOptions) -> Iterable[Observation]:
        return [Observation(1 if reader.running else 0)]

    def records(_: CallbackOptions) -> Iterable[Observation]:
        counts = {"decoded": reader.decoded, "kept": reader.kept_undecoded, "undecodable": reader.undecodable}
        return [Observation(n, {"handling": handling}) for handling, n in counts.items()]

    meter.create_observable_gauge(
        "inferq_results_chunk_reader_running",
        [running],
        description="1 while the chunk topics are read (an /events stream is open, or was within the grace)",
    )
    meter.create_observable_counter(
        "inferq_results_chunk_records_total",
        [records],
        description="chunk records read for /events streams, by handling: decoded, kept, undecodable",
    )
