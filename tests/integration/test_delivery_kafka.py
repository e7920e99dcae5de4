"""The reply-topic follower on the real broker: from the end of every partition, chunks (by their
header) and results to the hub in the order written, poison skipped, what came before not replayed."""

from __future__ import annotations

import asyncio
import functools

import pytest

from inferq.delivery.follower import KafkaReplyFeed, ReplyFollower
from inferq.delivery.hub import WaiterHub
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceChunk, InferenceResult
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
            lambda: KafkaReplyFeed(kafka_settings, kafka_settings.topics.results, client_id="test-follower"),
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
                records.append(a_result("r1", tenant="beta"))  # not ours
                records.append(a_result("r1"))
                await asyncio.to_thread(produce_replies, kafka_settings, "r1", records)
                got = [await waiter.next(20) for _ in range(21)]
                assert [c.seq for c in got[:20]] == list(range(20))  # type: ignore[union-attr]
                assert isinstance(got[20], InferenceResult) and got[20].tenant == "acme"
                assert await early.result(0.5) is None
            assert follower.undecodable == 1
            assert not follower.failed
        finally:
            await follower.stop()

    asyncio.run(asyncio.wait_for(scenario(), 90))


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
