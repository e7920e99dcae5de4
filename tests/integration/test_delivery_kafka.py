"""The reply-topic follower on the real broker: from the end of every partition of the reply topic
and its chunk topic, chunks (by their header) in the order written and results to the hub, poison
skipped, chunks nobody here follows not decoded, what came before not replayed."""

from __future__ import annotations

import asyncio
import functools

import pytest
from confluent_kafka import Producer

from inferq.delivery.follower import KafkaReplyFeed, ReplyFollower, followed_topics
from inferq.delivery.hub import WaiterHub
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import CHUNK_KIND, KIND_HEADER, InferenceChunk, InferenceResult
from tests.support import fakes
from tests.support.replies import produce_replies

pytestmark = pytest.mark.kafka


# Acme's, unless said otherwise.
a_chunk = functools.partial(fakes.a_chunk, tenant="acme")
a_result = functools.partial(fakes.a_result, tenant="acme")


def test_the_follower_wakes_waiters_with_chunks_in_order_then_the_result(
    kafka_settings: KafkaSettings,
) -> None:
    async def scenario() -> None:
        produce_replies(kafka_settings, "early", [a_result("early")])  # before the follower started: not owed
        hub = WaiterHub()
        follower = ReplyFollower(
            lambda: KafkaReplyFeed(
                kafka_settings,
                followed_topics(kafka_settings, kafka_settings.topics.results),
                client_id="test-follower",
            ),
            hub,
        )
        await follower.start()
        try:
            await asyncio.wait_for(follower.ready.wait(), 30)
            with hub.waiting("acme", "r1") as waiter, hub.waiting("acme", "early") as early:
                records: list[InferenceChunk | InferenceResult | bytes] = [
                    a_chunk("r1", seq) for seq in range(20)
                ]
                records.insert(5, b"poison, not avro")
                await asyncio.to_thread(produce_replies, kafka_settings, "r1", records)
                # Another caller's chunk (held by another process): passed over, never decoded.
                await asyncio.to_thread(produce_unfollowed_chunk, kafka_settings, "r2")
                chunks = [await waiter.next(20) for _ in range(20)]
                assert [c.seq for c in chunks] == list(range(20))  # type: ignore[union-attr]
                # Another topic than the chunks': written after them, so the waiter takes it last.
                results = [a_result("r1", tenant="beta"), a_result("r1")]  # beta's is not ours
                await asyncio.to_thread(produce_replies, kafka_settings, "r1", results)
                result = await waiter.next(20)
                assert isinstance(result, InferenceResult) and result.tenant == "acme"
                assert await early.result(0.5) is None
            await asyncio.sleep(0.5)  # r2's chunk has long been read by now
            assert follower.undecodable == 1
            assert not follower.failed
        finally:
            await follower.stop()

    asyncio.run(asyncio.wait_for(scenario(), 90))


def produce_unfollowed_chunk(settings: KafkaSettings, request_id: str) -> None:
    producer = Producer(settings.producer_config(client_id="test-replies"))
    headers = [(KIND_HEADER, CHUNK_KIND)]
    producer.produce(settings.topics.chunks, value=b"not avro", key=request_id.encode(), headers=headers)
    assert producer.flush(15) == 0


def test_a_follower_by_pattern_follows_every_matching_reply_topic(kafka_settings: KafkaSettings) -> None:
    async def scenario() -> None:
        hub = WaiterHub()
        pattern = rf"^{kafka_settings.topics.results.replace('.', '[.]')}$"
        follower = ReplyFollower(
            lambda: KafkaReplyFeed(kafka_settings, [], client_id="test-follower", pattern=pattern), hub
        )
        await follower.start()
        try:
            await asyncio.wait_for(follower.ready.wait(), 30)
            with hub.waiting("acme", "p1") as waiter:
                await asyncio.to_thread(produce_replies, kafka_settings, "p1", [a_result("p1")])
                result = await waiter.result(20)
                assert result is not None and result.request_id == "p1"
        finally:
            await follower.stop()

    asyncio.run(asyncio.wait_for(scenario(), 90))
