"""Kafka helpers of the latency and throughput benchmarks: bulk-load requests, count and read topics back,
and switch a topic to broker timestamps."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from inferq.messaging.codec import request_codec
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicSpec

ADMIN_TIMEOUT_S = 15.0
_HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Read:
    """One record read back: where it sits, its Kafka timestamp and its bytes."""

    partition: int
    offset: int
    log_append_time: bool
    timestamp_ms: int
    value: bytes


def create_with_log_append_time(bootstrap: str, spec: TopicSpec) -> None:
    """Create `spec`'s topic with `message.timestamp.type=LogAppendTime`: the broker stamps each record
    when it appends it. The pipeline never reads record timestamps; the latency bench wants the
    broker's own "written" instant, which no producer-side time (CreateTime, `created_at_ms`) is.
    Create it before `create_topics`, which then leaves it as it is."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {**spec.config(), "message.timestamp.type": "LogAppendTime"}
    topic = NewTopic(spec.name, num_partitions=spec.partitions, replication_factor=1, config=config)
    for future in admin.create_topics([topic], request_timeout=ADMIN_TIMEOUT_S).values():
        future.result(timeout=ADMIN_TIMEOUT_S)


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        raise RuntimeError(f"topic {topic} not found: {found.error if found else 'no metadata'}")
    return sorted(found.partitions)


class RecordCounter:
    """Counts the records written to a topic (the sum of its partitions' high watermarks), with one
    client kept open: the benches poll it while the system under test runs on the same cores."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._topic = topic
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "inferq-bench-counter"})
        self._partitions = [TopicPartition(topic, p) for p in _partitions(self._consumer, topic)]

    def count(self) -> int:
        total = 0
        for tp in self._partitions:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=ADMIN_TIMEOUT_S)
            total += high - low
        return total

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> RecordCounter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_topic(bootstrap: str, topic: str, *, timeout_s: float = 60.0) -> list[Read]:
    """Every record of `topic` from the beginning up to the high watermarks at the time of the call."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # Assigned, not subscribed: the group is never joined and nothing is committed.
            "group.id": "inferq-bench-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        ends: dict[int, int] = {}
        for partition in _partitions(consumer, topic):
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=ADMIN_TIMEOUT_S
            )
            if high > 0:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        reads: list[Read] = []
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(ends)} not read to the end in {timeout_s} s")
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    continue
                part, offset = message.partition(), message.offset()
                if part is None or offset is None:
                    continue
                kind, stamp = message.timestamp()
                reads.append(
                    Read(part, offset, kind == TIMESTAMP_LOG_APPEND_TIME, stamp, message.value() or b"")
                )
                if part in ends and offset + 1 >= ends[part]:
                    del ends[part]
        return reads
    finally:
        consumer.close()


def chat_requests(count: int, tag: str, *, now_ms: int) -> Iterator[InferenceRequest]:
    """`count` valid HIGH chats, ids `<tag>-<n>`; deadlines an hour away, so a throughput run does not
    turn into an expiry run."""
    for i in range(count):
        yield InferenceRequest(
            request_id=f"{tag}-{i:06d}",
            scenario="realtime_chat",
            tier=Tier.HIGH,
            created_at_ms=now_ms,
            expire_at_ms=now_ms + _HOUR_MS,
            messages=(ChatMessage("user", f"Hi, it's me again ({i}). How was your day?"),),
        )


def brief_requests(count: int, tag: str, *, now_ms: int) -> Iterator[InferenceRequest]:
    """`count` valid LOW morning briefs over 1,000 sessions, ids `<tag>-<n>`."""
    for i in range(count):
        yield InferenceRequest(
            request_id=f"{tag}-{i:07d}",
            scenario="morning_brief",
            tier=Tier.LOW,
            created_at_ms=now_ms,
            expire_at_ms=now_ms + 12 * _HOUR_MS,
            session_id=f"brief-{i % 1000}",
            messages=(ChatMessage("user", f"Brief {i}: weather, calendar, mood."),),
        )


def bulk_produce(
    bootstrap: str,
    topic: str,
    requests: Iterable[InferenceRequest],
    *,
    log: Callable[[str], None] | None = None,
    log_every: int = 200_000,
) -> float:
    """Write `requests` to `topic` as fast as librdkafka batches them; returns the seconds it took."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # Bulk load, not interactive traffic: big batches, compressed, acknowledged by the leader.
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "acks": "1",
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    codec = request_codec()
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None and len(failures) < 10:
            failures.append(err)

    started = time.monotonic()
    for i, request in enumerate(requests):
        value = codec.encode(request)
        while True:
            try:
                producer.produce(topic, value, key=request.key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain it
        if i % 10_000 == 0:
            producer.poll(0)
        if log is not None and i and i % log_every == 0:
            log(f"  produced {i:,} records ({time.monotonic() - started:.0f} s)")
    left = producer.flush(120.0)
    if left or failures:
        raise RuntimeError(f"{left} records not delivered to {topic}; first errors: {failures}")
    return time.monotonic() - started
