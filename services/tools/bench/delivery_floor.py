"""The floor of the durable path, measured in the delivery bench's own run (`inferq bench delivery`).

A call through inferq crosses, at the least, two HTTP exchanges (the client with ingest, the
dispatcher with the backend) and two Kafka trips (the request to the dispatcher, the result to
ingest's follower). The direct phases measure one HTTP exchange; `kafka_trip` measures one Kafka
trip with the product's own clients and settings, at the phase's rate, on the same broker and
machine, while the pipeline is idle: the product's producer (idempotent, acks=all, linger 0:
`KafkaSettings.producer_config`) writes a stamped record, and the followers' own feed
(`KafkaReplyFeed`: group-less, from the end) reads it. So the floor of a sync call is 2 x (direct added) + 2 x
(trip), and the floor of a streamed call's first chunk one trip plus the direct first-chunk delay:
what is above the floor is what the services' Python and scheduling add.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import dataclass

from inferq.delivery.follower import KafkaReplyFeed
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import AsyncProducer
from inferq.messaging.reply_reader import FETCH_TIMEOUT_MS, MAX_BATCH_RECORDS
from inferq.tools.bench.machine import cell, table
from inferq.tools.bench.pipeline_run import open_loop
from inferq.tools.measures import Stats, stats

# A record's value: the perf_counter instant it was handed to the producer.
_STAMP = struct.Struct("!d")
# How long the reader waits for the last records once every one is sent, and the sends for their
# acknowledgements once the last is due.
DRAIN_S = 5.0
SEND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class KafkaTrip:
    """One Kafka trip's figures at one rate (ms): produced → acknowledged, produced → read."""

    rate_per_s: float
    acked_ms: Stats | None
    read_ms: Stats | None
    sent: int
    read: int


async def kafka_trip(
    kafka: KafkaSettings, topic: str, rate_per_s: float, duration_s: float, warmup_s: float
) -> KafkaTrip:
    """Records sent open loop at `rate_per_s` for `warmup_s` + `duration_s` to `topic` (which
    exists), read by the followers' own feed; the records of the warm-up are not counted."""
    feed = KafkaReplyFeed(kafka, topic, client_id="bench-trip")
    await feed.start()
    producer = AsyncProducer(kafka.producer_config(client_id="bench-trip"))
    await producer.start()
    counted_from = int(warmup_s * rate_per_s)
    total = counted_from + int(duration_s * rate_per_s)
    read: dict[float, float] = {}

    async def send(index: int, _due_ns: int) -> float:
        sent = time.perf_counter()
        await producer.produce(topic, _STAMP.pack(sent), key=str(index).encode())
        return (time.perf_counter() - sent) * 1000

    try:
        reading = asyncio.create_task(_read(feed, read, total))
        acked = await open_loop(send, total, rate_per_s, timeout_s=SEND_TIMEOUT_S)
        # What did not arrive in time is not counted: `read` < `sent` says so.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reading, DRAIN_S)
    finally:
        await producer.stop()
        await feed.stop()
    sent_at = sorted(read)
    counted = [read[s] for s in sent_at[counted_from:]]
    return KafkaTrip(rate_per_s, stats(acked[counted_from:]), stats(counted), total, len(read))


async def _read(feed: KafkaReplyFeed, read: dict[float, float], total: int) -> None:
    while len(read) < total:
        batches = await feed.getmany(timeout_ms=FETCH_TIMEOUT_MS, max_records=MAX_BATCH_RECORDS)
        now = time.perf_counter()
        for records in batches.values():
            for record in records:
                (sent,) = _STAMP.unpack(record.value or b"")
                read[sent] = (now - sent) * 1000


@dataclass(frozen=True)
class Floor:
    """At one rate: the floor of a sync call's added latency and of a first chunk's delay (p50, ms),
    from the direct phases and the Kafka trip of the same run; None where a part is missing."""

    rate_per_s: float
    trip: KafkaTrip
    sync_ms: float | None
    first_chunk_ms: float | None


def floor(trip: KafkaTrip, direct_sync_p50: float | None, direct_first_chunk_p50: float | None) -> Floor:
    """Two HTTP exchanges and two trips for a sync call; one trip and the SSE write for a chunk."""
    read = trip.read_ms.p50 if trip.read_ms is not None else None
    sync = None if read is None or direct_sync_p50 is None else 2 * direct_sync_p50 + 2 * read
    first = None if read is None or direct_first_chunk_p50 is None else read + direct_first_chunk_p50
    return Floor(trip.rate_per_s, trip, sync, first)


def floor_table(floors: list[tuple[Floor, float | None, float | None]]) -> list[str]:
    """Per rate: the Kafka trip, each floor, and what was measured through inferq (sync added p50,
    first chunk p50) beside it."""
    rows = []
    for f, sync, first in floors:
        acked, read = f.trip.acked_ms, f.trip.read_ms
        rows.append(
            (
                f"{f.rate_per_s:g}",
                " / ".join(cell(getattr(acked, q) if acked else None) for q in ("p50", "p95")),
                " / ".join(cell(getattr(read, q) if read else None) for q in ("p50", "p95", "p99")),
                f"{cell(f.sync_ms)} / {cell(sync)}",
                f"{cell(f.first_chunk_ms)} / {cell(first)}",
            )
        )
    head = (
        "calls/s",
        "trip: acked p50 / p95 ms",
        "trip: read p50 / p95 / p99 ms",
        "sync p50: floor / measured ms",
        "first chunk p50: floor / measured ms",
    )
    return table(head, rows)
