"""The results service's chunk reader on the real broker: no consumer of the chunk topic while no
event stream is open; an event stream gets its answer's chunks from their start (written before it
opened, within the replay window), then live ones, then the result; another tenant's stream of the
same id gets none of them; a record that does not decode is skipped; and once the streams are gone
the reader stops its consumer after the grace."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer

from inferq.clock import wall_ms
from inferq.delivery.hub import WaiterHub
from inferq.messaging.kafka_config import KafkaSettings
from inferq.results.app import asgi_app, bootstrap
from inferq.results.settings import ResultsSettings
from tests.support.fakes import a_chunk, a_result
from tests.support.inprocess import served
from tests.support.replies import produce_chunks, produce_replies
from tests.support.sse import events_of, next_event
from tests.support.waiting import eventually

pytestmark = pytest.mark.kafka

CHUNK_READER = "inferq-results-chunks"


def test_an_event_stream_gets_its_chunks_from_their_start_then_the_result(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    stopped: list[str] = []
    construct, stop = AIOKafkaConsumer.__init__, AIOKafkaConsumer.stop

    def counted(self: AIOKafkaConsumer, *topics: str, **config: Any) -> None:
        self.test_client_id = config.get("client_id")  # type: ignore[attr-defined]
        made.append(self.test_client_id)  # type: ignore[attr-defined]
        construct(self, *topics, **config)

    async def counted_stop(self: AIOKafkaConsumer) -> None:
        stopped.append(self.test_client_id)  # type: ignore[attr-defined]
        await stop(self)

    monkeypatch.setattr(AIOKafkaConsumer, "__init__", counted)
    monkeypatch.setattr(AIOKafkaConsumer, "stop", counted_stop)
    settings = ResultsSettings(
        kafka=kafka_settings,
        group_id=f"{kafka_settings.topic_prefix}-results",
        db_path=tmp_path / "r.db",
        events_max_s=4,
        chunk_reader_grace_s=1,
    )
    # Before any stream: a piece written 10 min ago (before the 120 s replay window), then the
    # answer's first piece, a record that does not decode, and another request's piece.
    produce_chunks(kafka_settings, "s1", [a_chunk("s1", 0, delta="stale")], timestamp_ms=wall_ms() - 600_000)
    produce_chunks(kafka_settings, "s1", [a_chunk("s1", 0, delta="Hel"), b"\x00not a chunk"])
    produce_chunks(kafka_settings, "x", [a_chunk("x", 0, delta="nobody follows x")])
    parts = bootstrap(settings, hub=WaiterHub())
    reader = parts.chunks
    assert reader is not None

    async def scenario() -> None:
        app = asgi_app(parts, check_topics=True, reload_on_sighup=False)
        async with served(app) as url, httpx.AsyncClient(base_url=url, timeout=40) as client:
            await eventually(
                lambda: client.get("/readyz"),
                "ready",
                45,
                interval_s=0.1,
                done=lambda r: r.status_code == 200,
            )
            # A long poll wants no chunks: still no consumer of the chunk topic.
            assert (await client.get("/v1/requests/s1", params={"wait": 1})).status_code == 202
            assert CHUNK_READER not in made and not reader.running
            theirs = asyncio.create_task(client.get("/v1/requests/s1/events", params={"tenant": "beta"}))
            async with client.stream("GET", "/v1/requests/s1/events") as stream:
                lines = stream.aiter_lines()
                first = await next_event(lines)
                await asyncio.to_thread(produce_chunks, kafka_settings, "s1", [a_chunk("s1", 1, delta="lo")])
                second = await next_event(lines)
                await asyncio.to_thread(
                    produce_replies, kafka_settings, "s1", [a_result("s1", output="Hello")]
                )
                last = await next_event(lines)
            assert [first[0], second[0], last[0]] == ["chunk", "chunk", "result"]
            assert (first[1]["delta"], second[1]["delta"], last[1]["output"]) == ("Hel", "lo", "Hello")
            body = (await theirs).text
            assert [name for name, _ in events_of(body)] == ["timeout"], "another tenant's id: nothing"
            assert "Hel" not in body
            # Both streams gone: after the grace (1 s) the reader stops its consumer.
            await eventually(lambda: reader.running, "chunk reader stopped", 10, done=lambda r: not r)
            assert stopped.count(CHUNK_READER) == made.count(CHUNK_READER) == 1

    asyncio.run(asyncio.wait_for(scenario(), 120))
    assert reader.undecodable == 1, "the record that does not decode is skipped"
    assert reader.kept_undecoded == 1, "x's piece, followed by nobody, is kept undecoded"
    assert reader.decoded == 2, "Hel and lo: the stale piece is before the replay window"
