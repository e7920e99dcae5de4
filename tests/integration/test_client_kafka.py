"""The Kafka-native client on the real broker, with the test as the dispatcher: the request is the
product's Avro record on its tier's topic with the region's reply topic; the outcome and the chunks
(in order, repeats dropped, a restart marked) come back through one follower; another tenant's record
for the same id is not ours; nothing is held after a wait times out or a stream is left; a bad
request is refused before anything is produced (tests/unit/test_client_kafka_rules.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from confluent_kafka import Producer

from inferq.client import FailedError, InferqClient, WaitTimeoutError
from inferq.client.kafka import KafkaTransport
from inferq.messaging.admin import create_topics
from inferq.messaging.codec import chunk_codec, request_codec, result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import (
    CHUNK_KIND,
    KIND_HEADER,
    InferenceChunk,
    InferenceRequest,
    InferenceResult,
    Status,
)
from inferq.messaging.tiers import Tier
from tests.support.kafka import read_all

pytestmark = pytest.mark.kafka


def answer(
    settings: KafkaSettings, request: InferenceRequest, records: list[InferenceChunk | InferenceResult]
) -> None:
    producer = Producer(settings.producer_config(client_id="test-dispatcher"))
    for record in records:
        if isinstance(record, InferenceChunk):
            value, headers = chunk_codec().encode(record), [(KIND_HEADER, CHUNK_KIND)]
        else:
            value, headers = result_codec().encode(record), None
        producer.produce(
            request.reply_to or "", value=value, key=request.request_id.encode(), headers=headers
        )
    assert producer.flush(15) == 0


def result(
    request: InferenceRequest, *, tenant: str | None = None, status: Status = Status.OK, output: str = "done"
) -> InferenceResult:
    return InferenceResult(
        request.request_id,
        request.tier,
        status,
        "m",
        request.created_at_ms,
        request.created_at_ms + 5,
        1,
        "d1",
        output=output,
        tenant=tenant or request.tenant,
        error=None if status is Status.OK else "backend said no",
    )


def chunk(request: InferenceRequest, seq: int, delta: str, *, attempt: int = 1) -> InferenceChunk:
    return InferenceChunk(request.request_id, request.tenant, attempt, seq, delta, "m", 1, f"d{attempt}")


async def taken(settings: KafkaSettings, tier: Tier, count: int) -> list[InferenceRequest]:
    records = await asyncio.to_thread(
        read_all, settings.bootstrap_servers, settings.topics.requests(tier), expect=count, timeout_s=20
    )
    return [request_codec().decode(r.value()) for r in records]


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 120))


@pytest.fixture
def eu_settings(kafka_settings: KafkaSettings) -> KafkaSettings:
    create_topics(kafka_settings, regions=["eu"])
    return kafka_settings


def test_the_request_is_the_products_record_and_its_outcome_comes_back(eu_settings: KafkaSettings) -> None:
    async def body() -> None:
        async with InferqClient(KafkaTransport(eu_settings, region="eu", tenant="acme")) as client:
            handle = await client.submit("morning_brief", "brief for u1", request_id="k-1", session_id="u1")
            assert handle.tier is Tier.LOW
            (request,) = await taken(eu_settings, Tier.LOW, 1)
            assert (request.request_id, request.tenant, request.scenario) == ("k-1", "acme", "morning_brief")
            assert request.reply_to == f"{eu_settings.topics.results}.eu"
            assert request.origin_region == "eu"
            assert request.messages[0].content == "brief for u1"
            assert request.expire_at_ms == handle.expire_at_ms
            # Another tenant's outcome for the same id first: not ours, it must not answer us.
            answer(
                eu_settings,
                request,
                [result(request, tenant="beta", output="theirs"), result(request, output="ours")],
            )
            outcome = await client.result("k-1", timeout=30)
            assert outcome.output == "ours"
            assert client.transport.pending == 0  # type: ignore[attr-defined]

    run(body)


def test_a_stream_gives_chunks_in_order_without_repeats_and_marks_a_restart(
    eu_settings: KafkaSettings,
) -> None:
    async def body() -> None:
        async with InferqClient(KafkaTransport(eu_settings, region="eu")) as client:
            stream = client.stream("realtime_chat", "tell me")

            async def dispatcher() -> None:
                (request,) = await taken(eu_settings, Tier.HIGH, 1)
                assert request.stream is True
                answer(
                    eu_settings,
                    request,
                    [
                        chunk(request, 0, "a"),
                        chunk(request, 1, "b"),
                        chunk(request, 1, "b"),  # a repeat
                        chunk(request, 0, "X", attempt=2),
                        chunk(request, 1, "Y", attempt=2),  # a redo
                        result(request, output="XY"),
                    ],
                )

            task = asyncio.create_task(dispatcher())
            seen = [(c.delta, c.restart) async for c in stream]
            await task
            assert seen == [("a", False), ("b", False), ("X", True), ("Y", False)]
            assert stream.text == "XY" == (stream.outcome.output if stream.outcome else None)
            assert client.transport.pending == 0  # type: ignore[attr-defined]

    run(body)


def test_a_failed_outcome_raises_and_a_timeout_holds_nothing(eu_settings: KafkaSettings) -> None:
    async def body() -> None:
        transport = KafkaTransport(eu_settings, region="eu")
        async with InferqClient(transport) as client:
            late = await client.submit("realtime_chat", "one")
            with pytest.raises(WaitTimeoutError):
                await client.result(late.request_id, timeout=0.2)
            assert transport.pending == 0
            failing = await client.submit("realtime_chat", "two")
            requests = {r.request_id: r for r in await taken(eu_settings, Tier.HIGH, 2)}
            answer(
                eu_settings,
                requests[failing.request_id],
                [result(requests[failing.request_id], status=Status.FAILED)],
            )
            with pytest.raises(FailedError, match="backend said no"):
                await client.result(failing.request_id, timeout=30)
            # A stream left after its first chunk frees its waiter.
            stream = client.stream("realtime_chat", "three")

            async def first_chunk() -> None:
                (request,) = [r for r in await taken(eu_settings, Tier.HIGH, 3) if r.stream]
                answer(eu_settings, request, [chunk(request, 0, "x"), chunk(request, 1, "y")])

            feeder = asyncio.create_task(first_chunk())
            async with stream:
                async for _ in stream:
                    break
            await feeder
            assert transport.pending == 0
        assert transport.pending == 0

    run(body)


def test_transports_of_one_region_share_one_follower_and_close_it_with_the_last(
    eu_settings: KafkaSettings,
) -> None:
    from inferq.client import kafka as kafka_transport

    async def body() -> None:
        acme, beta = (
            KafkaTransport(eu_settings, region="eu", tenant="acme"),
            KafkaTransport(eu_settings, region="eu", tenant="beta"),
        )
        a, b = InferqClient(acme), InferqClient(beta)
        await a.submit("realtime_chat", "a", request_id="same-id")
        await b.submit("realtime_chat", "b", request_id="same-id")
        assert [f.users for f in kafka_transport._FOLLOWING.values()] == [2]
        by_tenant = {r.tenant: r for r in await taken(eu_settings, Tier.HIGH, 2)}
        answer(eu_settings, by_tenant["acme"], [result(by_tenant["acme"], output="for acme")])
        answer(eu_settings, by_tenant["beta"], [result(by_tenant["beta"], output="for beta")])
        assert (await a.result("same-id", timeout=30)).output == "for acme"
        assert (await b.result("same-id", timeout=30)).output == "for beta"
        await a.aclose()
        assert [f.users for f in kafka_transport._FOLLOWING.values()] == [1]
        await b.aclose()
        assert kafka_transport._FOLLOWING == {}

    run(body)
