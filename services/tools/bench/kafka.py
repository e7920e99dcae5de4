"""The benchmarks' Kafka edge: a broker to run against, fresh topics, the reply-topic reader, the
group's lag; bulk-loading requests, counting and reading topics back, broker timestamps on a topic."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.lag import partition_lag
from inferq.messaging.records import ChatMessage, InferenceRequest, InferenceResult, is_chunk
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicSpec
from inferq.tools.broker.ephemeral import broker_on_free_ports, cluster_on_free_ports

_POLL_S = 0.2
CLUSTER_HEAP = "512m"
ADMIN_TIMEOUT_S = 15.0
_HOUR_MS = 3_600_000


@contextmanager
def bench_broker(home: Path, log: Callable[[str], None], *, cluster: bool = False) -> Iterator[str]:
    """`$KAFKA_BOOTSTRAP_SERVERS` when set; else our own broker (with `cluster`, a three-node
    cluster, 512 MB of heap per node) in a fresh home on free ports, stopped and deleted afterwards
    (a million-record topic is not worth keeping)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        log(f"using the broker at {external} (KAFKA_BOOTSTRAP_SERVERS)")
        yield external
        return
    started = time.monotonic()
    if cluster:
        with cluster_on_free_ports(home, nodes=3, heap=CLUSTER_HEAP) as nodes:
            log(f"three-node cluster started at {nodes.bootstrap} in {time.monotonic() - started:.1f} s")
            yield nodes.bootstrap
        log("cluster stopped")
        return
    with broker_on_free_ports(home) as broker:
        took = time.monotonic() - started
        log(f"broker started at {broker.bootstrap} in {took:.1f} s (home {broker.config.home})")
        yield broker.bootstrap
    log("broker stopped")


def fresh_topics(bootstrap: str, name: str) -> KafkaSettings:
    """Every topic of a new prefix, `bench.<name>-<6 hex>`: a run never meets another's backlog."""
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=f"bench.{name}-{uuid.uuid4().hex[:6]}")
    create_topics(kafka)
    return kafka


def kafka_version(project_root: Path) -> str:
    """The Kafka version of the local broker's jars, read from the kafka-server jar's name."""
    jars = sorted((project_root / ".inferq" / "kafka" / "jars").glob("kafka-server-[0-9]*.jar"))
    return jars[0].stem.removeprefix("kafka-server-") if jars else "unknown"


class ResultCollector:
    """Reads the reply topic from its beginning in a thread; keeps the first result per request_id
    (as the results service does), decoded. The bench uses it instead of polling HTTP: one consumer
    sees every outcome as it is written."""

    def __init__(self, bootstrap: str, topic: str, group_id: str) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group_id,
                # The topic is fresh per run: everything on it belongs to this run.
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self._consumer.subscribe([topic])
        self._codec = result_codec()
        self._results: dict[str, InferenceResult] = {}
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self.undecodable = 0
        self.duplicates = 0
        self._thread = threading.Thread(target=self._loop, name="results-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self._consumer.consume(num_messages=500, timeout=_POLL_S):
                    if message.error() is not None:
                        continue  # partition EOF and transient errors: librdkafka retries by itself
                    if is_chunk(message.headers()):
                        continue  # a streamed answer's piece, not an outcome
                    self._take(message.value() or b"")
        finally:
            self._consumer.close()

    def _take(self, raw: bytes) -> None:
        try:
            result = self._codec.decode(raw)
        except DecodeError:
            self.undecodable += 1
            return
        with self._lock:
            if result.request_id in self._results:
                self.duplicates += 1
            else:
                self._results[result.request_id] = result
                self._lock.notify_all()

    def wait_for(self, request_ids: set[str], timeout_s: float) -> dict[str, InferenceResult]:
        """Block until every id has a result or `timeout_s` passes; returns the results found."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not request_ids <= self._results.keys():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(timeout=min(remaining, 1.0))
            return {rid: self._results[rid] for rid in request_ids if rid in self._results}

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is None:  # never started: the loop that would close the consumer never ran
            self._consumer.close()
        else:
            self._thread.join(timeout=10.0)


def group_lag(bootstrap: str, group_id: str, topic: str, partitions: int) -> dict[int, int]:
    """Per partition of `topic`: records the group has not committed past (high watermark - committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10.0)
        lag = {}
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10.0)
            lag[tp.partition] = partition_lag(high=high, low=low, committed=tp.offset)
    except KafkaException as exc:
        raise RuntimeError(f"cannot read the lag of {group_id} on {topic}: {exc}") from exc
    else:
        return lag
    finally:
        consumer.close()


# -- requests in bulk, topics read back --------------------------------------------------------
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
