"""`KafkaTierConsumer`: the `TierConsumer` contract over aiokafka, the dispatcher's Kafka edge.

aiokafka keeps every step on the event loop: rebalance callbacks are coroutines awaited inside the
rebalance, so a revoked partition's offsets are committed before another member can take it, with no
cross-thread hand-off. Partitions cross this edge as `Partition` and errors as `ConsumerError`, so no
step sees an aiokafka type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError as AiokafkaCommitFailedError
from aiokafka.errors import IllegalStateError, InvalidSessionTimeoutError, KafkaError
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KTopicPartition

from inferq.dispatcher.consumer import (
    Batches,
    CommitPoint,
    FetchedRecord,
    Partition,
    RebalanceListener,
    Unfetched,
)
from inferq.dispatcher.errors import CommitFailedError, ConsumerError, SessionTimeoutRefusedError
from inferq.messaging.commit_metadata import readable_metadata
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.topics import TopicNames

log = logging.getLogger("inferq.dispatcher.consumer")

COMMITS_READ_TIMEOUT_S = 5.0
# How long the coordinator waits for every member to rejoin once a rebalance began. aiokafka's
# default is the session timeout, 2 s here: a member whose revocation (a commit) took longer would be
# dropped and the rebalance begun again. Revocation is one commit; 30 s is a generous bound.
REBALANCE_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class Membership:
    """How the group notices a dead member (classic protocol): silent for `session_timeout_ms`, it
    is dropped and its partitions reassigned; heartbeats every `heartbeat_interval_ms`."""

    session_timeout_ms: int = 2_000
    heartbeat_interval_ms: int = 500

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_interval_ms * 2 <= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat interval {self.heartbeat_interval_ms} ms must be positive and at most half "
                f"the session timeout {self.session_timeout_ms} ms"
            )


def _partition(tp: TopicPartition) -> Partition:
    return Partition(tp.topic, tp.partition)


def _aiokafka(partition: Partition) -> TopicPartition:
    return TopicPartition(partition.topic, partition.partition)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, listener: RebalanceListener) -> None:
        self._listener = listener

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._listener.on_revoked([_partition(tp) for tp in revoked])

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._listener.on_assigned([_partition(tp) for tp in assigned])


class KafkaTierConsumer:
    """Consumes the three request topics and the retry topic in the dispatcher group."""

    def __init__(
        self, kafka: KafkaSettings, group_id: str, client_id: str, membership: Membership | None = None
    ) -> None:
        self._topics: TopicNames = kafka.topics
        self._membership = membership or Membership()
        self._consumer = AIOKafkaConsumer(
            **kafka.aiokafka_config(),
            group_id=group_id,
            client_id=client_id,
            # Offsets are committed only after an outcome is durably written (see checkpoint.py).
            enable_auto_commit=False,
            # A new group starts at the beginning: requests written before it existed are still owed.
            auto_offset_reset="earliest",
            # Small fetches: the backlog belongs in Kafka, not in this process.
            max_partition_fetch_bytes=256 * 1024,
            fetch_max_bytes=4 * 1024 * 1024,
            # Return a fetch as soon as one record is there; chat must not wait for a batch to fill.
            fetch_max_wait_ms=100,
            # Fewer than this many seconds between polls would mean the loop is stuck, not busy.
            max_poll_interval_ms=300_000,
            # A SIGKILLed member is noticed after the session timeout (see Membership); the heartbeat
            # runs on this event loop, so a loop stalled for a whole session would be dropped too.
            session_timeout_ms=self._membership.session_timeout_ms,
            heartbeat_interval_ms=self._membership.heartbeat_interval_ms,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
        )
        # Reads the group's commits (with their metadata); never subscribes, never commits.
        self._commit_reader = Consumer(
            kafka.admin_config()
            | {"group.id": group_id, "client.id": f"{client_id}-commits", "enable.auto.commit": False}
        )
        self._started = False
        self._closed = False

    async def start(self, listener: RebalanceListener) -> None:
        if self._started:
            return
        topics = [*self._topics.all_requests, self._topics.retry]
        self._consumer.subscribe(topics, listener=_Listener(listener))
        try:
            # Waits for the first assignment: the join is where a broker refuses the session.
            await self._consumer.start()
        except InvalidSessionTimeoutError as exc:
            await self._consumer.stop()
            raise SessionTimeoutRefusedError(self._membership.session_timeout_ms) from exc
        self._started = True

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Leaves the group, so the partitions move to another member at once.
        await self._consumer.stop()
        await asyncio.to_thread(self._commit_reader.close)

    def assignment(self) -> set[Partition]:
        return {_partition(tp) for tp in self._consumer.assignment()}

    async def fetch(self, max_records: int, timeout_ms: int) -> Batches:
        try:
            batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        except InvalidSessionTimeoutError as exc:  # a broker whose setting changed since the start
            raise SessionTimeoutRefusedError(self._membership.session_timeout_ms) from exc
        fetched: dict[Partition, list[FetchedRecord]] = {
            _partition(tp): records for tp, records in batches.items()
        }
        return fetched

    def seek(self, partition: Partition, offset: int) -> None:
        self._consumer.seek(_aiokafka(partition), offset)

    def pause(self, partitions: Collection[Partition]) -> None:
        if partitions:
            self._consumer.pause(*(_aiokafka(p) for p in partitions))

    def resume(self, partitions: Collection[Partition]) -> None:
        if partitions:
            self._consumer.resume(*(_aiokafka(p) for p in partitions))

    def paused(self) -> set[Partition]:
        return {_partition(tp) for tp in self._consumer.paused()}

    async def commit(self, offsets: Mapping[Partition, tuple[int, str]]) -> None:
        if not offsets:
            return
        try:
            await self._consumer.commit({_aiokafka(p): point for p, point in offsets.items()})
        except (AiokafkaCommitFailedError, IllegalStateError, KafkaError) as exc:
            # Retriable errors aiokafka already retried; what reaches us is a changed membership
            # (the partitions were or are being taken away) or a refusal the next tick may not hit.
            raise CommitFailedError(
                f"commit refused: {exc!r}",
                partitions=[str(p) for p in offsets],
                retriable=not isinstance(exc, AiokafkaCommitFailedError),
            ) from exc

    async def committed(self, partitions: Collection[Partition]) -> dict[Partition, CommitPoint | None]:
        """Read with a librdkafka consumer that never subscribes (so it never joins the group): its
        `committed()` returns the commit metadata, which aiokafka's public API does not. Not the
        admin client's offset listing: librdkafka 2.16 aborts the process when that request meets
        "not coordinator" while a broker loads its groups. Bounded."""
        if not partitions:
            return {}
        wanted = [KTopicPartition(p.topic, p.partition) for p in partitions]
        try:
            listing = await asyncio.wait_for(
                asyncio.to_thread(self._commit_reader.committed, wanted, COMMITS_READ_TIMEOUT_S),
                COMMITS_READ_TIMEOUT_S + 1,
            )
        except (KafkaException, TimeoutError) as exc:
            raise ConsumerError(f"the group's commits are unreadable: {exc!r}", retriable=True) from exc
        return {
            Partition(entry.topic, entry.partition): (
                CommitPoint(entry.offset, readable_metadata(entry) or "") if entry.offset >= 0 else None
            )
            for entry in listing
        }

    async def beginning_offsets(self, partitions: Collection[Partition]) -> dict[Partition, int]:
        if not partitions:
            return {}
        try:
            starts = await asyncio.wait_for(
                self._consumer.beginning_offsets([_aiokafka(p) for p in partitions]), COMMITS_READ_TIMEOUT_S
            )
        except (KafkaError, TimeoutError) as exc:
            raise ConsumerError(f"log start offsets unreadable: {exc!r}", retriable=True) from exc
        return {_partition(tp): int(offset) for tp, offset in starts.items()}

    async def unfetched(self, topics: Collection[str], timeout_s: float) -> dict[Partition, Unfetched]:
        owned = [tp for tp in self._consumer.assignment() if tp.topic in topics]
        if not owned:
            return {}
        try:
            ends = await asyncio.wait_for(self._consumer.end_offsets(owned), timeout_s)
            stands: dict[Partition, Unfetched] = {}
            for tp in owned:
                position = await asyncio.wait_for(self._consumer.position(tp), timeout_s)
                stands[_partition(tp)] = Unfetched(int(position), int(ends[tp]))
        except (KafkaError, TimeoutError) as exc:
            raise ConsumerError(f"backlog unknown: {exc!r}", retriable=True) from exc
        return stands

    def partition_count(self, topic: str) -> int:
        return len(self._consumer.partitions_for_topic(topic) or ())
