"""A time range of topics, turned into offset ranges by Kafka's timestamp index.

``--from``/``--to`` are ISO-8601 instants (``2025-01-05T20:00``, ``2025-01-05T20:00:00+08:00``,
``...Z``; without an offset, the machine's local time) or epoch milliseconds. The start offset of a
partition is the first record with a timestamp at or after ``from`` (`offsets_for_times`); its end
(exclusive) is the first at or after ``to``, else the end of the partition when the range was
computed, so a replay of a live topic ends instead of following it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import Consumer, KafkaException, TopicPartition

from inferq.tools.loadtest.errors import ReplayError, TimeRangeError

_EPOCH_MS = re.compile(r"^\d{1,16}$")
_NO_OFFSET = -1  # offsets_for_times: no record at or after the timestamp


def parse_instant(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 instant or of a number of epoch milliseconds."""
    text = text.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise TimeRangeError(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 time (e.g. 2025-01-05T20:00:00+08:00)"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a time without an offset is the machine's local time
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class TimeRange:
    """[from_ms, to_ms) in epoch milliseconds; None is open on that side."""

    from_ms: int | None = None
    to_ms: int | None = None

    def __post_init__(self) -> None:
        if self.from_ms is not None and self.to_ms is not None and self.to_ms <= self.from_ms:
            raise TimeRangeError(f"--to ({self.to_ms}) must be after --from ({self.from_ms})")

    @classmethod
    def parse(cls, from_text: str | None, to_text: str | None) -> TimeRange:
        return cls(
            None if from_text is None else parse_instant(from_text),
            None if to_text is None else parse_instant(to_text),
        )

    def contains(self, timestamp_ms: int) -> bool:
        return (self.from_ms is None or timestamp_ms >= self.from_ms) and (
            self.to_ms is None or timestamp_ms < self.to_ms
        )


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def partition_ranges(
    consumer: Consumer, topics: list[str], time_range: TimeRange, *, timeout_s: float = 15.0
) -> list[PartitionRange]:
    """The non-empty offset range of every partition of `topics` inside `time_range`."""
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ReplayError(f"the source cluster did not answer within {timeout_s:.0f} s: {exc}") from exc
    missing = [t for t in topics if t not in metadata.topics]
    if missing:
        raise ReplayError(
            f"source topics missing: {', '.join(missing)} (check --source-prefix / --topic-prefix)"
        )
    partitions = [TopicPartition(t, p) for t in topics for p in sorted(metadata.topics[t].partitions)]
    try:
        marks = {
            (tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=timeout_s)
            for tp in partitions
        }
        starts = _lookup(consumer, partitions, time_range.from_ms, timeout_s)
        ends = _lookup(consumer, partitions, time_range.to_ms, timeout_s)
    except KafkaException as exc:
        raise ReplayError(f"cannot read offsets of {', '.join(topics)}: {exc}") from exc
    ranges = []
    for tp in partitions:
        key = (tp.topic, tp.partition)
        low, high = marks[key]
        # No record at or after --from: the range is empty; none after --to: it runs to the end.
        found = starts.get(key)
        start = low if found is None else (high if found == _NO_OFFSET else max(low, found))
        found = ends.get(key)
        end = high if found is None or found == _NO_OFFSET else min(high, found)
        if end > start:
            ranges.append(PartitionRange(tp.topic, tp.partition, start, end))
    return ranges


def _lookup(
    consumer: Consumer, partitions: list[TopicPartition], at_ms: int | None, timeout_s: float
) -> dict[tuple[str, int], int]:
    if at_ms is None:
        return {}
    query = [TopicPartition(tp.topic, tp.partition, at_ms) for tp in partitions]
    found = consumer.offsets_for_times(query, timeout=timeout_s)
    failed = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in found if tp.error is not None]
    if failed:
        raise ReplayError(f"timestamp lookup failed: {'; '.join(failed)}")
    return {(tp.topic, tp.partition): tp.offset for tp in found}
