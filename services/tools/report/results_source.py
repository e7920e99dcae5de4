"""Reads a run's results straight from the results topic (the Kafka edge of `inferq report`).

The topic is read from its beginning up to the end offsets seen at the start, so the read is
bounded even while the pipeline keeps writing. Request ids are namespaced by run (`<run_id>:<n>`)
and results are keyed by request id, so a record of another run is skipped by its key without
decoding it. As in the results service, the first result per request id wins (a redelivered
duplicate is counted and dropped). Partitions are assigned, not subscribed: no consumer group is
joined and no offset is committed, so a report never disturbs anyone's position.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from inferq.messaging.codec import TypedCodec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceResult, is_chunk
from inferq.tools.report.errors import SourceError

_BATCH = 1000
_POLL_S = 0.5


@dataclass
class ResultsRead:
    by_run: dict[str, list[InferenceResult]]
    scanned: int = 0
    duplicates: int = 0
    undecodable: int = 0
    seen: set[str] = field(default_factory=set, repr=False)


def run_of(request_id: str, run_ids: Sequence[str]) -> str | None:
    for run_id in run_ids:
        if request_id.startswith(f"{run_id}:"):
            return run_id
    return None


def read_results(settings: KafkaSettings, run_ids: Sequence[str], *, timeout_s: float = 60.0) -> ResultsRead:
    """Every result of `run_ids` on `<prefix>.results`, as decoded records, in partition order."""
    topic = settings.topics.results
    consumer = Consumer(
        {
            **settings.admin_config(),
            # Required by librdkafka even for assign(); never used to commit.
            "group.id": f"inferq-report-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    try:
        return _read(consumer, topic, run_ids, timeout_s)
    except KafkaException as exc:
        raise SourceError(topic, str(exc.args[0] if exc.args else exc)) from exc
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, run_ids: Sequence[str], timeout_s: float) -> ResultsRead:
    deadline = time.monotonic() + timeout_s
    metadata = consumer.list_topics(topic, timeout=timeout_s)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        raise SourceError(topic, "no such topic (is --topic-prefix right?)")
    ends: dict[int, int] = {}
    for partition in info.partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        if high > low:
            ends[partition] = high
    read = ResultsRead({run_id: [] for run_id in run_ids})
    if not ends:
        return read
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    keys = [f"{run_id}:".encode() for run_id in run_ids]
    codec = result_codec()
    while ends:
        if time.monotonic() > deadline:
            raise SourceError(
                topic, f"read timed out after {timeout_s:.0f} s, partitions {sorted(ends)} unfinished"
            )
        for message in consumer.consume(num_messages=_BATCH, timeout=_POLL_S):
            error = message.error()
            if error is not None:
                if error.fatal() or not error.retriable():
                    raise SourceError(topic, str(error))
                continue  # transient: librdkafka retries by itself
            partition, offset = message.partition(), message.offset()
            if partition is None or offset is None:
                continue
            end = ends.get(partition)
            if end is None or offset >= end:
                continue  # written after the report started, or a partition already finished
            _take(message, keys, run_ids, codec, read)
            if offset + 1 >= end:
                del ends[partition]
    return read


def _take(
    message: Message,
    keys: Sequence[bytes],
    run_ids: Sequence[str],
    codec: TypedCodec[InferenceResult],
    read: ResultsRead,
) -> None:
    read.scanned += 1
    key = message.key()
    if isinstance(key, bytes) and not any(key.startswith(k) for k in keys):
        return
    if is_chunk(message.headers()):
        return  # a streamed answer's piece, not an outcome
    try:
        result = codec.decode(message.value() or b"")
    except DecodeError:
        read.undecodable += 1
        return
    request_id = result.request_id
    run_id = run_of(request_id, run_ids)
    if run_id is None:
        return
    if request_id in read.seen:
        read.duplicates += 1
        return
    read.seen.add(request_id)
    read.by_run[run_id].append(result)
