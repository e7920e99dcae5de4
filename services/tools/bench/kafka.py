"""The benchmarks' Kafka edge: a broker to run against, the reply-topic reader, the group's lag."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.lag import partition_lag
from inferq.messaging.records import InferenceResult, is_chunk
from inferq.tools.broker.ephemeral import broker_on_free_ports, cluster_on_free_ports

_POLL_S = 0.2
CLUSTER_HEAP = "512m"


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
