"""A request's replies as its caller's service reads them off a reply topic: chunks, results, order."""

from __future__ import annotations

import time
from dataclasses import dataclass

from inferq.messaging.codec import chunk_codec, result_codec
from inferq.messaging.records import InferenceChunk, InferenceResult, is_chunk
from tests.support.kafka import reader


@dataclass
class Reply:
    """What one request's caller finds on its reply topic, in the order it is there."""

    chunks: list[InferenceChunk]
    results: list[InferenceResult]
    order: list[str]  # "chunk" / "result", in offset order
    partitions: set[int]


def read_replies(
    bootstrap: str, topic: str, request_ids: set[str], *, timeout_s: float = 60.0, settle_s: float = 0.0
) -> dict[str, Reply]:
    """Read `topic` from the start until each request has a result, then on until nothing new came
    for `settle_s` (so a second outcome would be seen too); bounded by `timeout_s`."""
    consumer = reader(bootstrap)
    consumer.subscribe([topic])
    replies = {rid: Reply([], [], [], set()) for rid in request_ids}
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if all(r.results for r in replies.values()) and time.monotonic() - quiet_since >= settle_s:
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            quiet_since = time.monotonic()
            reply = replies.get((msg.key() or b"").decode())
            if reply is None:
                continue
            reply.partitions.add(msg.partition())
            if is_chunk(msg.headers()):
                reply.chunks.append(chunk_codec().decode(msg.value()))
                reply.order.append("chunk")
            else:
                reply.results.append(result_codec().decode(msg.value()))
                reply.order.append("result")
    finally:
        consumer.close()
    return replies
