"""Streaming through the queue on the real broker: the dispatcher and the simulated backend (streaming
SSE) in the test's loop, requests written straight to Kafka, the reply topic read back as a caller's
service would read it."""

from __future__ import annotations

import asyncio
import functools

import pytest

from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import Status
from tests.support.inprocess import backend_stats, running_dispatcher, sim_backend
from tests.support.kafka import a_request, produce_requests, read_all
from tests.support.loop import in_loop
from tests.support.replies import Reply, read_replies

pytestmark = pytest.mark.kafka


def test_a_streamed_request_gives_ordered_chunks_then_one_result_of_their_text(
    kafka_settings: KafkaSettings,
) -> None:
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    streamed = [
        a_request("HIGH", stream=True, messages=[{"role": "user", "content": f"stream number {n} please"}])
        for n in range(3)
    ]
    plain = a_request("HIGH")

    async def scenario() -> dict[str, object]:
        async with (
            sim_backend(speed=5.0) as url,
            running_dispatcher(kafka_settings, url, stream_chunk_tokens=2, stream_chunk_linger_ms=5),
        ):
            produce_requests(bootstrap, topics.requests_by_name("HIGH"), [*streamed, plain])
            replies = await asyncio.to_thread(
                read_replies, bootstrap, topics.results, {r.request_id for r in [*streamed, plain]}
            )
            return {"replies": replies, "stats": await backend_stats(url)}

    outcome = asyncio.run(scenario())
    replies: dict[str, Reply] = outcome["replies"]  # type: ignore[assignment]
    for request in streamed:
        reply = replies[request.request_id]
        assert len(reply.results) == 1
        (result,) = reply.results
        assert result.status is Status.OK
        assert len(reply.chunks) >= 2, "a sentence of several tokens comes in several chunks"
        assert reply.order == ["chunk"] * len(reply.chunks) + ["result"], "chunks, then the result"
        assert [c.seq for c in reply.chunks] == list(range(len(reply.chunks)))
        assert "".join(c.delta for c in reply.chunks) == result.output
        assert result.output == f"sim reply to: {request.messages[0].content}"
        assert len(reply.partitions) == 1, "one partition per request keeps the order"
        assert {(c.attempt, c.dispatcher_id) for c in reply.chunks} == {(1, result.dispatcher_id)}
    plain_reply = replies[plain.request_id]
    assert plain_reply.chunks == [] and [r.status for r in plain_reply.results] == [Status.OK]
    stats: dict[str, object] = outcome["stats"]  # type: ignore[assignment]
    assert stats["by_status"] == {"200": 4}


@in_loop
async def test_a_stream_dropped_mid_way_gives_its_chunks_and_exactly_one_failed(
    kafka_settings: KafkaSettings,
) -> None:
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    doomed = a_request(
        "MEDIUM", stream=True, messages=[{"role": "user", "content": "a long enough question to stream"}]
    )

    async with (
        sim_backend(speed=4.0, stream_drop_rate=1.0) as url,
        running_dispatcher(
            kafka_settings, url, stream_chunk_tokens=1, stream_chunk_linger_ms=0, max_attempts=3
        ),
    ):
        produce_requests(bootstrap, topics.requests_by_name("MEDIUM"), [doomed])
        replies = await asyncio.to_thread(read_replies, bootstrap, topics.results, {doomed.request_id})
        dead = await asyncio.to_thread(read_all, bootstrap, topics.dlq, expect=1)
        # Read again to the end: whatever else would come (a retry's chunks, a second outcome)
        # comes within the retry backoff, well inside the 3 s of quiet waited for.
        later = await asyncio.to_thread(
            functools.partial(read_replies, bootstrap, topics.results, {doomed.request_id}, settle_s=3.0)
        )
        retries = await asyncio.to_thread(read_all, bootstrap, topics.retry, expect=1, timeout_s=2)
        replies = {**replies, "later": later[doomed.request_id]}
        stats = await backend_stats(url)
    reply = replies[doomed.request_id]
    (result,) = reply.results
    assert result.status is Status.FAILED
    chunks = len(reply.chunks)
    assert chunks >= 1
    assert result.error is not None
    assert result.error.startswith(f"failed mid-stream after {chunks} chunks: ")
    assert reply.order == ["chunk"] * chunks + ["result"]
    assert "".join(c.delta for c in reply.chunks) in "sim reply to: a long enough question to stream"
    assert replies["later"].order == reply.order, "exactly one outcome, no chunks from a retry"
    assert retries == [], "a stream that sent tokens is never retried"
    assert len(dead) == 1 and dict(dead[0].headers())["inferq.error"] == result.error.encode()
    assert stats["streams_dropped"] == 1
