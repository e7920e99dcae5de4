"""A dispatcher taking partitions over reads the group's commits with confluent-kafka, which reads
aiokafka's commit metadata past its end: bytes that are not UTF-8 made `TopicPartition.metadata`
raise, which ended the assignment (found by the cluster chaos test: a dispatcher never served its
partitions again, 101 requests without an outcome). Unreadable metadata is ignored: its work is
redone, never skipped, and the partitions are served."""

from __future__ import annotations

import asyncio

from inferq.dispatcher.consumer import CommitPoint, Partition
from inferq.dispatcher.kafka_consumer import KafkaTierConsumer


class Entry:
    def __init__(self, partition: int, offset: int, metadata: bytes | str | None) -> None:
        self.topic = "t"
        self.partition = partition
        self.offset = offset
        self._metadata = metadata

    @property
    def metadata(self) -> str | None:
        if isinstance(self._metadata, bytes):
            return self._metadata.decode("utf-8")  # as confluent-kafka does: raises when not UTF-8
        return self._metadata


class Reader:
    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries

    def committed(self, wanted: object, timeout: float) -> list[Entry]:
        return self.entries


def test_unreadable_commit_metadata_is_read_as_none_and_the_others_as_they_are():
    consumer = object.__new__(KafkaTierConsumer)
    consumer._commit_reader = Reader(  # type: ignore[attr-defined]
        [Entry(0, 5, b"v2:1\xb8\x01"), Entry(1, 7, "v2:2;"), Entry(2, -1001, None)]
    )
    partitions = [Partition("t", 0), Partition("t", 1), Partition("t", 2)]
    points = asyncio.run(consumer.committed(partitions))
    assert points == {
        Partition("t", 0): CommitPoint(5, ""),
        Partition("t", 1): CommitPoint(7, "v2:2;"),
        Partition("t", 2): None,
    }
