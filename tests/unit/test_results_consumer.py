"""The results consumer alone: a fake feed, the real store; commit only after the batch is stored."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest
from aiokafka.errors import KafkaConnectionError

from inferq.messaging.codec import chunk_codec, result_codec
from inferq.messaging.records import CHUNK_KIND, KIND_HEADER, InferenceChunk
from inferq.results import consumer as consumer_module
from inferq.results.consumer import ResultConsumer, ResultsMetrics
from inferq.results.store import ResultStore
from tests.support.fakes import FakeResultFeed, InMemoryMetrics
from tests.support.fakes import a_result as result

CODEC = result_codec()


class StoreCheckingFeed(FakeResultFeed):
    """Notes, at each commit, how many results the store already holds."""

    def __init__(self, store: ResultStore) -> None:
        super().__init__()
        self.store = store
        self.stored_at_commit: list[int] = []

    async def commit(self) -> None:
        self.stored_at_commit.append(await self.store.count())
        await super().commit()


def test_a_batch_is_stored_before_its_offsets_are_committed(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="inferq.results")
    reader = InMemoryMetrics()

    async def scenario() -> StoreCheckingFeed:
        async with ResultStore(tmp_path / "r.db") as store:
            feed = StoreCheckingFeed(store)
            consumer = ResultConsumer(lambda: feed, store, CODEC, ResultsMetrics(reader.meter))
            feed.push([CODEC.encode(result("a")), b"\x00garbage", None, CODEC.encode(result("b"))])
            feed.push([CODEC.encode(result("a", status="FAILED")), CODEC.encode(result("c"))])
            for _ in range(3):  # the third fetch finds nothing: no commit for it
                await consumer.consume_once(feed)
            assert (await store.get("default", "a")).status == "OK"
            return feed

    feed = asyncio.run(scenario())
    assert feed.stored_at_commit == [2, 3]
    assert feed.commits == [1, 2]
    assert reader.points("inferq_results_stored_total") == {frozenset(): 3}
    assert reader.points("inferq_results_duplicates_total") == {frozenset(): 1}
    assert reader.points("inferq_results_undecodable_total") == {frozenset(): 2}
    assert "undecodable result inferq.results[0]@1 skipped" in caplog.text


def test_consumption_outlives_a_broker_error_and_stops_cleanly(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(consumer_module, "RETRY_PAUSE_S", 0.01)
    events: list[str] = []

    class FlakyFeed(FakeResultFeed):
        failures = 1

        async def getmany(self, **kwargs):
            if self.failures:
                self.failures -= 1
                raise KafkaConnectionError("broker gone")
            return await super().getmany(**kwargs)

    async def scenario() -> bool:
        async with ResultStore(tmp_path / "r.db") as store:
            feed = FlakyFeed(events=events)
            consumer = ResultConsumer(lambda: feed, store, CODEC, ResultsMetrics(InMemoryMetrics().meter))
            await consumer.start()
            await consumer.start()  # idempotent
            feed.push([CODEC.encode(result("a"))])
            async with asyncio.timeout(5.0):
                while await store.get("default", "a") is None:
                    await asyncio.sleep(0.01)
            ready = consumer.ready.is_set()
            await consumer.stop()
            await consumer.stop()  # idempotent
            return ready

    assert asyncio.run(scenario()) is True
    assert events == ["feed.start", "feed.commit", "feed.stop"]
    assert "consuming results failed, trying again in 1 s" in caplog.text


@pytest.mark.parametrize("value", [b"", b"\xc3\x01" + b"\x00" * 8])
def test_poison_alone_still_commits(tmp_path, value):
    async def scenario() -> list[int]:
        async with ResultStore(tmp_path / "r.db") as store:
            feed = FakeResultFeed()
            consumer = ResultConsumer(lambda: feed, store, CODEC, ResultsMetrics(InMemoryMetrics().meter))
            feed.push([value])
            await consumer.consume_once(feed)
            assert await store.count() == 0
            return feed.commits

    # The record can never be stored: committing it is what keeps the partition moving.
    assert asyncio.run(scenario()) == [1]


def test_chunks_of_a_streamed_answer_are_passed_over_not_stored_nor_poison(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="inferq.results")
    reader = InMemoryMetrics()
    chunk = InferenceChunk("a", "default", 1, 0, "par", "m", 10, "d")
    marked = [(KIND_HEADER, CHUNK_KIND)]

    async def scenario() -> tuple[object, int, FakeResultFeed]:
        async with ResultStore(tmp_path / "r.db") as store:
            feed = FakeResultFeed()
            consumer = ResultConsumer(lambda: feed, store, CODEC, ResultsMetrics(reader.meter))
            feed.push(
                [
                    chunk_codec().encode(chunk),
                    chunk_codec().encode(replace(chunk, seq=1, delta="tial")),
                ],
                headers=marked,
            )
            feed.push([CODEC.encode(result("a"))], headers=[("traceparent", b"00-x")])
            # A chunk-marked record that is not a chunk is still not a result: passed over too.
            feed.push([b"\x00not avro"], headers=marked)
            for _ in range(3):
                await consumer.consume_once(feed)
            return await store.get("default", "a"), await store.count(), feed

    stored, count, feed = asyncio.run(scenario())
    assert stored is not None and stored.status == "OK"
    assert count == 1
    assert feed.commits == [1, 2, 3], "chunks are committed past like everything else"
    assert reader.points("inferq_results_undecodable_total") == {}
    assert reader.points("inferq_results_stored_total") == {frozenset(): 1}
    assert "undecodable" not in caplog.text
