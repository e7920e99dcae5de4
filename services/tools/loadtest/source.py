"""Where replay and export read recorded requests from: a time range of the request topics, or a trace file.

Both give records as ``(timestamp_ms, tier, key, value, ...)`` with `value` the request's Avro
single-object bytes, either in batches (order kept within a partition only: the fastest) or one by
one in timestamp order across partitions (for a paced replay and for export). The timestamp order
is a k-way merge: a record is released once every partition still being read has reached its
timestamp. Memory stays bounded: when too many records wait, the partitions ahead are paused until
the laggards catch up. Every wait is bounded: no progress for `stall_timeout_s` is an error.
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from inferq.messaging.codec import request_codec
from inferq.messaging.topics import TopicNames
from inferq.tools.loadtest.errors import ReplayError
from inferq.tools.loadtest.timerange import PartitionRange, TimeRange, partition_ranges
from inferq.tools.loadtest.tracefile import read_trace

# (timestamp_ms, tier, key, value, topic, partition, offset): where it was recorded travels along.
SourceRecord = tuple[int, str, bytes | None, bytes, str, int, int]
_TP = tuple[str, int]
_POLL_S = 0.5


def consumer_config(common: dict[str, Any]) -> dict[str, Any]:
    conf = dict(common)
    conf.update(
        {
            # librdkafka wants a group even for manual assignment; nothing is ever committed to it.
            "group.id": f"inferq-replay-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            # Bulk reading: large fetches so the broker, not round trips, sets the pace.
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
        }
    )
    return conf


class TopicSource:
    """A time range of the request topics of one prefix, optionally only some tiers."""

    def __init__(
        self,
        config: dict[str, Any],
        topics: TopicNames,
        tiers: Collection[str],
        time_range: TimeRange,
        *,
        batch_size: int = 10_000,
        stall_timeout_s: float = 30.0,
        max_buffered: int = 200_000,
    ) -> None:
        self._tier_of = {topics.requests_by_name(t): t for t in tiers}
        self._range = time_range
        self._batch_size = batch_size
        self._stall_timeout_s = stall_timeout_s
        self._max_buffered = max_buffered
        self._consumer = Consumer(consumer_config(config))
        try:
            self.ranges: list[PartitionRange] = partition_ranges(
                self._consumer, list(self._tier_of), time_range
            )
        except ReplayError:
            self._consumer.close()
            raise
        self.total: int | None = sum(r.size for r in self.ranges)

    def close(self) -> None:
        self._consumer.close()

    def batches(self) -> Iterator[list[SourceRecord]]:
        for records, _, _ in self._scan(track=False):
            if records:
                yield records

    def ordered(self) -> Iterator[SourceRecord]:
        heap: list[tuple[int, int, SourceRecord]] = []
        frontier: dict[_TP, int] = {}
        active = {(r.topic, r.partition) for r in self.ranges}
        held: set[_TP] = set()  # paused because they ran ahead while too many records waited
        seq = 0
        for records, seen, finished in self._scan(track=True):
            for record in records:
                heapq.heappush(heap, (record[0], seq, record))
                seq += 1
            for tp, ts in seen.items():
                frontier[tp] = max(frontier.get(tp, ts), ts)
            active -= finished
            held -= finished
            if not active:
                watermark = float("inf")
            elif active <= frontier.keys():
                watermark = min(frontier[tp] for tp in active)
            else:
                watermark = -float("inf")  # a partition has shown nothing yet: it may hold the earliest
            while heap and heap[0][0] <= watermark:
                yield heapq.heappop(heap)[2]
            if len(heap) > self._max_buffered:
                ahead = {tp for tp in active if frontier.get(tp, watermark) > watermark} - held
                self._consumer.pause([TopicPartition(*tp) for tp in ahead])
                held |= ahead
            # A held partition that has become the laggard must run, or nothing could ever be released.
            release = (
                held
                if len(heap) < self._max_buffered // 2
                else {tp for tp in held if frontier[tp] <= watermark}
            )
            if release:
                self._consumer.resume([TopicPartition(*tp) for tp in release])
                held -= release
        while heap:
            yield heapq.heappop(heap)[2]

    def _scan(self, *, track: bool) -> Iterator[tuple[list[SourceRecord], dict[_TP, int], set[_TP]]]:
        """Batches of in-range records, the latest timestamp seen per partition (`track`), partitions done."""
        remaining: dict[_TP, int] = {(r.topic, r.partition): r.end for r in self.ranges}
        self._consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in self.ranges])
        tier_of = self._tier_of
        # Plain bounds, not TimeRange.contains: a method call per record is a tenth of the loop's cost.
        lo = -(1 << 63) if self._range.from_ms is None else self._range.from_ms
        hi = (1 << 63) if self._range.to_ms is None else self._range.to_ms
        last_progress = time.monotonic()
        while remaining:
            # Any, not Message: the stubs make every accessor optional, but a consumed message without
            # error has topic, partition, offset and value; a None check per record costs the hot loop.
            messages: list[Any] = self._consumer.consume(self._batch_size, _POLL_S)
            records: list[SourceRecord] = []
            seen: dict[_TP, int] = {}
            finished: set[_TP] = set()
            for m in messages:
                if m.error() is not None:
                    raise ReplayError(f"reading {m.topic()}[{m.partition()}] failed: {m.error()}")
                topic, partition, offset = m.topic(), m.partition(), m.offset()
                tp = (topic, partition)
                end = remaining.get(tp)
                if end is None or offset >= end:
                    continue  # fetched past the range's end before the partition was paused
                ts = m.timestamp()[1]
                if lo <= ts < hi:
                    records.append((ts, tier_of[topic], m.key(), m.value(), topic, partition, offset))
                if track and ts > seen.get(tp, -1):
                    seen[tp] = ts
                if offset >= end - 1:
                    finished.add(tp)
            if not messages:
                # Offsets with no record (transaction markers, compaction) end a range without a message.
                finished |= self._reached_end(remaining)
            for tp in finished:
                remaining.pop(tp, None)
            if finished:
                self._consumer.pause([TopicPartition(*tp) for tp in finished])
            if messages or finished:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > self._stall_timeout_s:
                left = ", ".join(f"{t}[{p}] up to {e}" for (t, p), e in sorted(remaining.items()))
                raise ReplayError(f"no records for {self._stall_timeout_s:.0f} s; still to read: {left}")
            yield records, seen, finished

    def _reached_end(self, remaining: dict[_TP, int]) -> set[_TP]:
        positions = self._consumer.position([TopicPartition(t, p) for t, p in remaining])
        return {
            (tp.topic, tp.partition) for tp in positions if tp.offset >= remaining[(tp.topic, tp.partition)]
        }


class TraceFileSource:
    """The records of an exported trace file, re-encoded as request bytes; in the file's (timestamp) order."""

    def __init__(
        self, path: Path, tiers: Collection[str], time_range: TimeRange, *, batch_size: int = 5_000
    ) -> None:
        self._path = path
        self._tiers = frozenset(tiers)
        self._range = time_range
        self._batch_size = batch_size
        self.total: int | None = None  # unknown until read: the container header holds no count

    def close(self) -> None:
        """Nothing held open between reads."""

    def ordered(self) -> Iterator[SourceRecord]:
        encode = request_codec().avro.encode  # the trace file holds the Avro record as written
        for record in read_trace(self._path):
            request = record["request"]
            if request["tier"] in self._tiers and self._range.contains(record["timestamp_ms"]):
                yield (
                    record["timestamp_ms"],
                    request["tier"],
                    record["key"],
                    encode(request),
                    record["topic"],
                    record["partition"],
                    record["offset"],
                )

    def batches(self) -> Iterator[list[SourceRecord]]:
        batch: list[SourceRecord] = []
        for record in self.ordered():
            batch.append(record)
            if len(batch) >= self._batch_size:
                yield batch
                batch = []
        if batch:
            yield batch
