"""The results service on the real broker reads its reply topic once: the reader that stores the
results is the one Kafka consumer of the reply topic (the webhook ownership group beside it only
holds partitions, paused; the chunk reader, started by the event stream, reads the chunk topic),
and it still wakes a long poll and an event stream with what is written after they asked, while a
chunk found on the reply topic (an older dispatcher's) is neither streamed nor stored."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer

from inferq.delivery.hub import WaiterHub
from inferq.messaging.kafka_config import KafkaSettings
from inferq.results.app import create_app
from inferq.results.settings import ResultsSettings
from tests.support.fakes import a_chunk, a_result
from tests.support.inprocess import served
from tests.support.replies import produce_chunks, produce_replies
from tests.support.sse import next_event
from tests.support.waiting import eventually

pytestmark = pytest.mark.kafka


def test_one_reader_per_replica_still_wakes_a_long_poll_and_an_event_stream(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    consumers: list[dict[str, Any]] = []
    construct = AIOKafkaConsumer.__init__

    def counted(self: AIOKafkaConsumer, *topics: str, **config: Any) -> None:
        consumers.append({"client_id": config.get("client_id"), "group_id": config.get("group_id")})
        construct(self, *topics, **config)

    monkeypatch.setattr(AIOKafkaConsumer, "__init__", counted)
    settings = ResultsSettings(
        kafka=kafka_settings, group_id=f"{kafka_settings.topic_prefix}-results", db_path=tmp_path / "r.db"
    )
    # Written before the replica starts: the result is stored, the chunk on the reply topic passed over.
    produce_chunks(
        kafka_settings, "s1", [a_chunk("s1", 0, delta="stale")], topic=kafka_settings.topics.results
    )
    produce_replies(kafka_settings, "r0", [a_result("r0", output="earlier")])
    hub = WaiterHub()

    async def scenario() -> None:
        async with served(create_app(settings, hub=hub)) as url, httpx.AsyncClient(base_url=url) as client:
            await eventually(
                lambda: client.get("/readyz"),
                "ready",
                45,
                interval_s=0.1,
                done=lambda r: r.status_code == 200,
            )
            assert (await client.get("/v1/requests/r0")).json()["output"] == "earlier"
            polling = asyncio.create_task(client.get("/v1/requests/r1", params={"wait": 30}, timeout=40))
            async with client.stream("GET", "/v1/requests/s1/events", timeout=40) as stream:
                await eventually(lambda: hub.waiters, "2 waiters", 10, interval_s=0.02, done=lambda n: n == 2)
                hello = [a_chunk("s1", 1, delta="Hel"), a_chunk("s1", 2, delta="lo")]
                await asyncio.to_thread(produce_chunks, kafka_settings, "s1", hello)
                lines = stream.aiter_lines()
                # The chunks streamed, then the result (the dispatcher writes it after them).
                got = [await next_event(lines), await next_event(lines)]
                await asyncio.to_thread(
                    produce_replies, kafka_settings, "s1", [a_result("s1", output="Hello")]
                )
                await asyncio.to_thread(
                    produce_replies, kafka_settings, "r1", [a_result("r1", output="woken")]
                )
                got.append(await next_event(lines))
            answer = await polling
            assert answer.status_code == 200
            assert answer.json()["output"] == "woken"
            assert [name for name, _ in got] == ["chunk", "chunk", "result"]
            assert "".join(data["delta"] for name, data in got if name == "chunk") == "Hello"
            stored = await client.get("/v1/requests/s1")
            assert stored.json()["output"] == "Hello", "the chunk on the reply topic was not stored"

    asyncio.run(asyncio.wait_for(scenario(), 120))
    readers = [c["client_id"] for c in consumers if c["group_id"] is None]
    # The chunk reader only because an event stream was open.
    assert readers == ["inferq-results", "inferq-results-chunks"], consumers
    # The only other consumer is the webhook ownership membership (it reads no records).
    assert [c["group_id"] for c in consumers if c["group_id"] is not None] == [settings.consumer_group]
