"""What the dispatcher's steps need from a Kafka consumer, and nothing of aiokafka.

The steps (intake, pausing, checkpoint, the run loop) depend on `TierConsumer`, a Protocol.
`KafkaTierConsumer` (``kafka_consumer.py``) implements it over aiokafka for production; the tests use
an in-memory consumer (``tests/support/dispatcher_fakes.py``), so each step runs without a broker.

The contract a consumer keeps:

- `fetch` returns records of assigned, unpaused partitions in offset order, each partition from its
  position (the committed offset after an assignment, or where `seek` put it), and advances the
  position past what it returned.
- The rebalance listener's coroutines are awaited inside the rebalance: `on_revoked` before the
  partitions can go to another member (its commit still counts), `on_assigned` before records of the
  new assignment are handed out by `fetch`... mostly: aiokafka may resume fetching before the
  callback returned, which is why the checkpoint gates admission (`Checkpoint.settled`).
- Paused partitions return nothing; a rebalance may forget pauses (aiokafka does), so pausing is
  re-applied as desired state after every assignment (``pausing.py``).
- Errors are the dispatcher's own: `ConsumerError`, and `CommitFailedError` for a refused commit.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol


class Partition(NamedTuple):
    """One partition of one topic (equal to aiokafka's and librdkafka's pairs of the same values)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


# A record's `timestamp_type` when the broker set its timestamp on append (the topic's
# ``message.timestamp.type=LogAppendTime``); 0 is CreateTime, the producer's own clock.
LOG_APPEND_TIME = 1


class FetchedRecord(Protocol):
    """A consumed record, as far as the dispatcher reads it (aiokafka's `ConsumerRecord`)."""

    @property
    def offset(self) -> int: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def timestamp_type(self) -> int: ...


Batches = Mapping[Partition, Sequence[FetchedRecord]]


class Unfetched(NamedTuple):
    """Where a partition's fetching stands: the next offset to fetch and the log's end."""

    position: int
    end: int


@dataclass(frozen=True)
class CommitPoint:
    """The group's committed position of a partition and the metadata committed with it."""

    offset: int
    metadata: str = ""


class RebalanceListener(Protocol):
    """Called by the consumer inside a rebalance (aiokafka's `ConsumerRebalanceListener` contract)."""

    async def on_revoked(self, revoked: list[Partition]) -> None:
        """The partitions are about to go; a commit made now still counts."""
        ...

    async def on_assigned(self, assigned: list[Partition]) -> None:
        """The partitions are this member's now; fetching resumes from their committed offsets."""
        ...


class TierConsumer(Protocol):
    """The dispatcher's consumer of the request topics and the retry topic, in one group."""

    async def start(self, listener: RebalanceListener) -> None:
        """Subscribe and join the group; `listener` hears every rebalance."""
        ...

    async def stop(self) -> None:
        """Leave the group (a peer takes the partitions at once) and close. Idempotent."""
        ...

    def assignment(self) -> set[Partition]:
        """The partitions assigned to this member right now."""
        ...

    async def fetch(self, max_records: int, timeout_ms: int) -> Batches:
        """Up to `max_records` records, waiting at most `timeout_ms` for the first one."""
        ...

    def seek(self, partition: Partition, offset: int) -> None:
        """Fetch `partition` again from `offset` (records past the read-ahead are given back)."""
        ...

    def pause(self, partitions: Collection[Partition]) -> None: ...

    def resume(self, partitions: Collection[Partition]) -> None: ...

    def paused(self) -> set[Partition]: ...

    async def commit(self, offsets: Mapping[Partition, tuple[int, str]]) -> None:
        """Commit (next offset to read, metadata) per partition; `CommitFailedError` if refused."""
        ...

    async def committed(self, partitions: Collection[Partition]) -> dict[Partition, CommitPoint | None]:
        """The group's commit of each partition (None: it has none); `ConsumerError` if unreadable."""
        ...

    async def beginning_offsets(self, partitions: Collection[Partition]) -> dict[Partition, int]:
        """The first offset still in each partition's log; `ConsumerError` if unreadable."""
        ...

    async def unfetched(self, topics: Collection[str], timeout_s: float) -> dict[Partition, Unfetched]:
        """Per owned partition of `topics`: fetch position and log end; `ConsumerError` if unknown."""
        ...

    def partition_count(self, topic: str) -> int:
        """How many partitions `topic` has, as the consumer last heard (0 if unknown)."""
        ...
