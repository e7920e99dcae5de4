"""The client library against the services as processes on the real broker.

Kafka-native: two clients, for regions eu and us, in one process; each gets the outcomes of its own
requests, which the dispatcher wrote to that region's reply topic only; a stream's chunks make the
outcome's text; the sync wrapper works the same. HTTP: the long poll is found and used, a stream
comes through ingest's `stream` and results' events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from inferq.client import HttpTransport, InferqClient, SyncInferqClient, WaitTimeoutError
from inferq.client.kafka import KafkaTransport
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import Status
from inferq.tools.stack.pipeline import Pipeline
from tests.support.kafka import end_offsets, read_all
from tests.support.pipeline import running_pipeline

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path_factory.mktemp("client"),
        name="cl",
        regions=["eu", "us"],
        budget=4,
        backend_args=["--speed", "10"],
        extra_env={"INFERQ_DISPATCHER_SCHEDULE_PIN": "normal"},
    ) as stack:
        yield stack


def settings(pipeline: Pipeline, bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=pipeline.topic_prefix)


def test_kafka_clients_of_two_regions_each_get_their_own_outcomes(
    pipeline: Pipeline, kafka_bootstrap: str
) -> None:
    kafka = settings(pipeline, kafka_bootstrap)

    async def body() -> tuple[dict[str, list[str]], str, str]:
        eu = InferqClient(KafkaTransport(kafka, region="eu", tenant="default"))
        us = InferqClient(KafkaTransport(kafka, region="us", tenant="default"))
        async with eu, us:
            asked = {
                region: [client.infer("realtime_chat", f"{region} {n}", timeout=60) for n in range(4)]
                for region, client in (("eu", eu), ("us", us))
            }
            outcomes = {region: await asyncio.gather(*calls) for region, calls in asked.items()}
            for region, got in outcomes.items():
                assert [o.status for o in got] == [Status.OK] * 4
                assert [o.output for o in got] == [f"sim reply to: {region} {n}" for n in range(4)]
            async with eu.stream("realtime_chat", "stream to eu", timeout=60) as stream:
                deltas = [chunk.delta async for chunk in stream]
            assert stream.outcome is not None and stream.outcome.status is Status.OK
            assert deltas and "".join(deltas) == stream.text == stream.outcome.output
            for client in (eu, us):
                assert client.transport.pending == 0  # type: ignore[attr-defined]
            ids = {region: [o.request_id for o in got] for region, got in outcomes.items()}
            return ids, stream.outcome.request_id, stream.text

    ids, streamed, _ = asyncio.run(asyncio.wait_for(body(), 120))
    on_eu = read_all(kafka_bootstrap, f"{pipeline.topic_prefix}.results.eu", expect=10_000, timeout_s=5)
    on_us = read_all(kafka_bootstrap, f"{pipeline.topic_prefix}.results.us", expect=10_000, timeout_s=5)
    # The eu topic holds the stream's chunks too: keyed by the same request id.
    assert {m.key().decode() for m in on_eu} == {*ids["eu"], streamed}
    assert {m.key().decode() for m in on_us} == set(ids["us"])
    assert sum(end_offsets(kafka_bootstrap, f"{pipeline.topic_prefix}.results").values()) == 0


def test_the_sync_client_over_kafka(pipeline: Pipeline, kafka_bootstrap: str) -> None:
    with SyncInferqClient(KafkaTransport(settings(pipeline, kafka_bootstrap), region="us")) as client:
        handle = client.submit("emotion_analysis", "how do I feel", request_id=f"sync-{uuid.uuid4().hex}")
        assert handle.tier == "MEDIUM"
        assert client.result(handle.request_id, timeout=60).output == "sim reply to: how do I feel"
        text = "".join(chunk.delta for chunk in client.stream("realtime_chat", "a story", timeout=60))
        assert text == "sim reply to: a story"


def test_the_http_client_long_polls_and_streams(pipeline: Pipeline) -> None:
    async def body() -> None:
        transport = HttpTransport(pipeline.ingest_url, results_url=pipeline.results_url)
        async with InferqClient(transport) as client:
            outcome = await client.infer("realtime_chat", "over http", timeout=60)
            assert outcome.output == "sim reply to: over http"
            # An id with no outcome: the service holds the wait and answers 202 at its bound.
            with pytest.raises(WaitTimeoutError):
                await client.result(f"none-{uuid.uuid4().hex}", timeout=1.5)
            assert transport.long_poll is True
            async with client.stream("realtime_chat", "stream over http", timeout=60) as stream:
                deltas = [chunk.delta async for chunk in stream]
            assert stream.outcome is not None and stream.outcome.status is Status.OK
            assert "".join(deltas) == stream.outcome.output == "sim reply to: stream over http"

    asyncio.run(asyncio.wait_for(body(), 120))
