"""The results reader alone: a fake feed, the real store; how far each partition was read is stored
with the batch, a restart resumes after it, and the reader is ready once caught up."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest
from aiokafka.errors import KafkaConnectionError

from inferq.delivery.hub import WaiterHub
from inferq.messaging import reply_reader
from inferq.messaging.codec import chunk_codec, result_codec
from inferq.messaging.records import CHUNK_KIND, KIND_HEADER, InferenceChunk
from inferq.messaging.reply_positions import ReplyPartition
from inferq.results.consumer import ResultConsumer, ResultsMetrics
from inferq.results.store import ResultStore
from tests.support.fakes import FakeResultFeed, InMemoryMetrics
from tests.support.fakes import a_result as result
from tests.support.loop import in_loop

CODEC = result_codec()


PARTITION = ReplyPartition("inferq.results", 0)


@in_loop
async def test_a_batch_is_stored_with_how_far_its_partition_was_read(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="inferq.results")
    reader = InMemoryMetrics()

    async with ResultStore(tmp_path / "r.db") as store:
        feed = FakeResultFeed()
        consumer = ResultConsumer(lambda: feed, store, CODEC, ResultsMetrics(reader.meter))
        feed.push([CODEC.encode(result("a")), b"\x00garbage", None, CODEC.encode(result("b"))])
        feed.push([CODEC.encode(result("a", status="FAILED")), CODEC.encode(result("c"))])
        positions = []
        for _ in range(3):  # the third fetch finds nothing
            await consumer.consume_once(feed)
            positions.append(await store.positions())
        assert (await store.get("default", "a")).status == "OK"
        assert positions == [{PARTITION: 4}, {PARTITION: 6}, {PARTITION: 6}]
    assert reader.points("inferq_results_stored_total") == {frozenset(): 3}
    assert reader.points("inferq_results_duplicates_total") == {frozenset(): 1}
    assert reader.points("inferq_results_undecodable_total") == {frozenset(): 2}
    assert "undecodable result inferq.results[0]@1 skipped" in caplog.text


@in_loop
async def test_a_restarted_reader_passes_over_what_it_stored_before_and_goes_on_after_it(tmp_path):
    reader = InMemoryMetrics()

    async with ResultStore(tmp_path / "r.db") as store:
        first = FakeResultFeed()
        consumer = ResultConsumer(lambda: first, store, CODEC, ResultsMetrics(InMemoryMetrics().meter))
        first.push([CODEC.encode(result("a")), CODEC.encode(result("b"))])
        await consumer.consume_once(first)
    async with ResultStore(tmp_path / "r.db") as store:
        # The feed hands offset 0 out again (a seek lost, a partition re-assigned from its start).
        again = FakeResultFeed()
        consumer = ResultConsumer(lambda: again, store, CODEC, ResultsMetrics(reader.meter))
        replayed = [result("a", status="FAILED"), result("b"), result("c")]
        again.push([CODEC.encode(r) for r in replayed])
        await consumer.start()
        async with asyncio.timeout(5.0):
            await consumer.ready.wait()
        await consumer.stop()
        a, c = await store.get("default", "a"), await store.get("default", "c")
        assert (a.status, c.status, await store.positions()) == ("OK", "OK", {PARTITION: 3})
    # Passed over, not even read as duplicates: the two records below the stored position.
    assert reader.points("inferq_results_duplicates_total") == {frozenset(): 0}
    assert reader.points("inferq_results_stored_total") == {frozenset(): 1}


@in_loop
async def test_ready_only_once_everything_written_before_the_start_is_stored(tmp_path):
    class Backlog(FakeResultFeed):
        async def getmany(self, **kwargs):
            # One record per fetch: the backlog takes three fetches to read.
            return await super().getmany(timeout_ms=kwargs["timeout_ms"], max_records=1)

    async with ResultStore(tmp_path / "r.db") as store:
        feed = Backlog()
        consumer = ResultConsumer(lambda: feed, store, CODEC, ResultsMetrics(InMemoryMetrics().meter))
        for name in "abc":
            feed.push([CODEC.encode(result(name))])
        seen: list[tuple[bool, int]] = []
        await consumer.start()
        async with asyncio.timeout(5.0):
            # Readiness read before the count: a sample that was ready must already count all three
            # (the other order raced: the third stored between the count and the readiness).
            while not seen or not seen[-1][0]:
                ready = consumer.ready.is_set()
                seen.append((ready, await store.count()))
                await asyncio.sleep(0.001)
        await consumer.stop()
    assert seen[-1] == (True, 3)
    assert all(count == 3 for ready, count in seen if ready)


@in_loop
async def test_consumption_outlives_a_broker_error_and_stops_cleanly(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(reply_reader, "RETRY_PAUSE_S", 0.01)
    events: list[str] = []

    class FlakyFeed(FakeResultFeed):
        failures = 1

        async def getmany(self, **kwargs):
            if self.failures:
                self.failures -= 1
                raise KafkaConnectionError("broker gone")
            return await super().getmany(**kwargs)

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
        assert ready is True
    assert events == ["feed.start", "feed.stop"]
    assert "reading the reply topic failed, trying again in 1 s" in caplog.text


@pytest.mark.parametrize("value", [b"", b"\xc3\x01" + b"\x00" * 8])
@in_loop
async def test_poison_alone_still_moves_the_position_on(tmp_path, value):
    async with ResultStore(tmp_path / "r.db") as store:
        feed = FakeResultFeed()
        consumer = ResultConsumer(lambda: feed, store, CODEC, ResultsMetrics(InMemoryMetrics().meter))
        feed.push([value])
        await consumer.consume_once(feed)
        assert await store.count() == 0
        # The record can never be stored: reading past it is what keeps a restart from reading it again.
        assert await store.positions() == {PARTITION: 1}


@in_loop
async def test_chunks_of_a_streamed_answer_are_passed_over_not_stored_nor_poison(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="inferq.results")
    reader = InMemoryMetrics()
    chunk = InferenceChunk("a", "default", 1, 0, "par", "m", 10, "d")
    marked = [(KIND_HEADER, CHUNK_KIND)]

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
        stored = await store.get("default", "a")
        count = await store.count()
        positions = await store.positions()
        # The fetch of a chunk alone was not stored: its position goes with the next result.
        feed.push([CODEC.encode(result("b"))])
        await consumer.consume_once(feed)
        positions_then = await store.positions()
    assert stored is not None and stored.status == "OK"
    assert count == 1
    assert positions == {PARTITION: 3}, "a fetch of chunks alone is not stored"
    assert positions_then == {PARTITION: 5}, "chunks are read past like everything else"
    assert reader.points("inferq_results_undecodable_total") == {}
    assert reader.points("inferq_results_stored_total") == {frozenset(): 2}
    assert "undecodable" not in caplog.text


@in_loop
async def test_the_reader_wakes_the_hub_with_stored_results_and_never_hands_it_a_chunk(tmp_path):
    # Chunks have topics of their own (`chunk_reader`); one still on the reply topic (an older
    # dispatcher's) is passed over even when its request is followed.
    chunk = InferenceChunk("s1", "default", 1, 0, "old", "m", 10, "d")
    marked = [(KIND_HEADER, CHUNK_KIND)]

    async with ResultStore(tmp_path / "r.db") as store:
        hub = WaiterHub()
        feed = FakeResultFeed()
        consumer = ResultConsumer(
            lambda: feed, store, CODEC, ResultsMetrics(InMemoryMetrics().meter), hub=hub
        )
        with hub.waiting("default", "s1") as following:
            feed.push([chunk_codec().encode(chunk)], headers=marked, key="s1")
            await consumer.consume_once(feed)
            handed = await following.next(0)
        with hub.waiting("default", "s1", replay=True) as late:
            replayed = await late.next(0)
        with hub.waiting("default", "r", chunks=False) as polling:
            feed.push([CODEC.encode(result("r"))])
            await consumer.consume_once(feed)
            woken = await polling.result(1.0)
        stored = await store.get("default", "r")
    assert handed is None and replayed is None, "no chunk of the reply topic reaches the hub"
    assert consumer.chunks_passed_over == 1
    assert woken is not None and woken.request_id == "r"
    assert stored is not None
