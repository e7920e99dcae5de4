"""A request's replies on a reply topic and its chunk topic: written as the dispatcher writes them,
and read as its caller's service reads them (chunks, results, order)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Message, Producer

from inferq.messaging.codec import chunk_codec, result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import CHUNK_KIND, KIND_HEADER, InferenceChunk, InferenceResult, is_chunk
from inferq.messaging.topics import TopicNames
from tests.support.kafka import read_all


def produce_replies(
    settings: KafkaSettings, request_id: str, replies: Sequence[InferenceChunk | InferenceResult | bytes]
) -> None:
    """`replies` keyed by `request_id`, as the dispatcher writes them: a chunk on the chunk topic
    (`produce_chunks`), a result on the results topic, bytes as they are (a poison record) on the
    results topic."""
    producer = Producer(settings.producer_config(client_id="test-replies"))
    for reply in replies:
        if isinstance(reply, InferenceChunk):
            produce_chunks(settings, request_id, [reply])
            continue
        value = reply if isinstance(reply, bytes) else result_codec().encode(reply)
        producer.produce(settings.topics.results, value=value, key=request_id.encode())
    assert producer.flush(15) == 0


@dataclass
class Reply:
    """What one request's caller finds on its reply topic and the chunk topic beside it: the
    chunks in the order written, the results, and both in the order they were written."""

    chunks: list[InferenceChunk]
    results: list[InferenceResult]
    order: list[str]  # "chunk" / "result", in the order written (the records' timestamps)
    partitions: set[int]  # of the chunk topic: one per request keeps its chunks in order


def chunk_topic_of(reply_topic: str) -> str:
    """The chunk topic beside `reply_topic` (`TopicNames.chunks_for`, for any prefix)."""
    prefix, _, region = reply_topic.rpartition(".results")
    return TopicNames(prefix).chunks_for(f"{prefix}.results{region}")


def read_replies(
    bootstrap: str, topic: str, request_ids: set[str], *, timeout_s: float = 60.0, settle_s: float = 0.0
) -> dict[str, Reply]:
    """Read the reply `topic` from the start until each request has a result, then on until nothing
    new came for `settle_s` (so a second outcome would be seen too), bounded by `timeout_s`; then
    its chunk topic to its end (the dispatcher writes a result once its chunks are acknowledged)."""
    answered: set[str] = set()
    seen, quiet_since = 0, time.monotonic()

    def settled(records: list[Message]) -> bool:
        nonlocal seen, quiet_since
        answered.update((m.key() or b"").decode() for m in records[seen:])
        if len(records) > seen:
            seen, quiet_since = len(records), time.monotonic()
        return request_ids <= answered and time.monotonic() - quiet_since >= settle_s

    replies = {rid: Reply([], [], [], set()) for rid in request_ids}
    results = read_all(bootstrap, topic, until=settled, timeout_s=timeout_s)
    chunks = read_all(bootstrap, chunk_topic_of(topic), timeout_s=timeout_s)
    written: list[tuple[int, int, Message]] = [(m.timestamp()[1], 0, m) for m in chunks]
    written += [(m.timestamp()[1], 1, m) for m in results]
    for _, _, msg in sorted(written, key=lambda w: w[:2]):
        reply = replies.get((msg.key() or b"").decode())
        if reply is None:
            continue
        if is_chunk(msg.headers()):
            reply.partitions.add(msg.partition())
            reply.chunks.append(chunk_codec().decode(msg.value()))
            reply.order.append("chunk")
        else:
            reply.results.append(result_codec().decode(msg.value()))
            reply.order.append("result")
    return replies


def produce_chunks(
    settings: KafkaSettings,
    request_id: str,
    chunks: Sequence[InferenceChunk | bytes],
    *,
    topic: str | None = None,
    timestamp_ms: int | None = None,
) -> None:
    """`chunks` on the chunk topic (default: the results topic's, `<prefix>.chunks`) keyed by
    `request_id`, with the kind header as the dispatcher writes them; bytes as they are (a record
    that does not decode); `timestamp_ms` stamps them as written then (default: now)."""
    producer = Producer(settings.producer_config(client_id="test-chunks"))
    for chunk in chunks:
        value = chunk if isinstance(chunk, bytes) else chunk_codec().encode(chunk)
        producer.produce(
            topic or settings.topics.chunks,
            value=value,
            key=request_id.encode(),
            headers=[(KIND_HEADER, CHUNK_KIND)],
            **({} if timestamp_ms is None else {"timestamp": timestamp_ms}),
        )
    assert producer.flush(15) == 0
