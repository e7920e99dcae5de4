"""Results replicas on the real broker: each replica reads every partition of the reply topic into
its own table and resumes from its own positions; the results group splits which replica sends
which partition's webhooks, and a replica that leaves hands its partitions over with its done
watermark, so the successor sends exactly what is still owed."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from inferq.messaging.codec import result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.reply_positions import ReplyPartition, ReplySource
from inferq.results.consumer import ResultConsumer, ResultsMetrics
from inferq.results.feed import KafkaResultFeed
from inferq.results.ownership import WebhookOwnership
from inferq.results.settings import ResultsSettings
from inferq.results.store import ResultStore
from inferq.results.webhooks import result_body
from inferq.webhooks.outbox import WebhookOutbox
from tests.support.fakes import InMemoryMetrics, a_result
from tests.support.kafka import committed_offsets, end_offsets, produce
from tests.support.waiting import eventually

pytestmark = pytest.mark.kafka

CODEC = result_codec()
PARTITIONS = 6


def results_settings(kafka: KafkaSettings, tmp_path: Path) -> ResultsSettings:
    return ResultsSettings(
        kafka=kafka, group_id=f"{kafka.topic_prefix}-results", db_path=tmp_path / "unused.db"
    )


def write_results(kafka: KafkaSettings, names: list[str]) -> None:
    for i, name in enumerate(names):
        produce(
            kafka.bootstrap_servers,
            kafka.topics.results,
            [CODEC.encode(a_result(name))],
            key=name.encode(),
            partition=i % PARTITIONS,
        )


def test_each_replica_stores_every_partition_and_resumes_from_its_own_positions(kafka_settings, tmp_path):
    settings = results_settings(kafka_settings, tmp_path)
    topic = kafka_settings.topics.results
    write_results(kafka_settings, [f"r{i}" for i in range(30)])
    metrics = [InMemoryMetrics() for _ in range(3)]

    async def replica(path: Path, metrics: InMemoryMetrics) -> tuple[ResultStore, ResultConsumer]:
        store = ResultStore(path)
        await store.open()
        consumer = ResultConsumer(
            lambda: KafkaResultFeed(settings, store.positions), store, CODEC, ResultsMetrics(metrics.meter)
        )
        await consumer.start()
        async with asyncio.timeout(45):
            await consumer.ready.wait()  # ready means caught up: every result written before is stored
        return store, consumer

    async def scenario() -> tuple[list[int], list[dict[ReplyPartition, int]], int]:
        started = [await replica(tmp_path / f"r{i}.db", metrics[i]) for i in range(2)]
        counts = [await store.count() for store, _ in started]
        positions = [await store.positions() for store, _ in started]
        # Replica 0 stops; results keep coming; it restarts on its own database.
        store, consumer = started[0]
        await consumer.stop()
        await store.close()
        await asyncio.to_thread(write_results, kafka_settings, [f"late{i}" for i in range(6)])
        again, consumer_again = await replica(tmp_path / "r0.db", metrics[2])
        restarted = await again.count()
        for store, consumer in [(again, consumer_again), started[1]]:
            await consumer.stop()
            await store.close()
        return counts, positions, restarted

    counts, positions, restarted = asyncio.run(scenario())
    assert counts == [30, 30]
    ends = {
        ReplyPartition(topic, p): offset
        for p, offset in end_offsets(kafka_settings.bootstrap_servers, topic).items()
    }
    assert positions == [{k: v - 1 for k, v in ends.items()}] * 2  # before the 6 late ones (one each)
    assert restarted == 36
    # The restarted replica read only what came after its positions: nothing again.
    assert metrics[2].points("inferq_results_stored_total") == {frozenset(): 6}
    assert metrics[2].points("inferq_results_duplicates_total") == {frozenset(): 0}


def test_the_group_splits_webhooks_and_a_leaving_owner_hands_over_its_done_watermark(
    kafka_settings, tmp_path
):
    settings = results_settings(kafka_settings, tmp_path)
    topic = kafka_settings.topics.results
    partitions = [ReplyPartition(topic, p) for p in range(PARTITIONS)]

    async def scenario() -> tuple[
        set[ReplyPartition], set[ReplyPartition], dict[int, int], list[ReplySource]
    ]:
        replicas = []
        for name in ("a", "b"):
            outbox = WebhookOutbox(result_body)
            store = ResultStore(tmp_path / f"{name}.db", hooks=[outbox])
            await store.open()
            # Two results with a callback per partition, at offsets 0 and 1, in both replicas.
            for where in partitions:
                for offset in (0, 1):
                    result = dataclasses.replace(
                        a_result(f"{where.partition}-{offset}"), callback_url="https://hooks.example/x"
                    )
                    await store.put_many(
                        [result],
                        sources=[ReplySource(topic, where.partition, offset)],
                        positions={where: offset + 1},
                    )
            ownership = WebhookOwnership(settings, store, outbox, refresh_interval_s=0.5)
            await ownership.start()
            replicas.append((store, outbox, ownership))
        (store_a, outbox_a, a), (store_b, outbox_b, b) = replicas

        async def split() -> bool:
            owned_a, owned_b = set(a.owned()), set(b.owned())
            return (
                bool(owned_a)
                and bool(owned_b)
                and owned_a | owned_b == set(partitions)
                and not owned_a & owned_b
            )

        await eventually(split, "the group splitting the partitions", 30, interval_s=0.05)
        owned_by_a = set(a.owned())
        # a delivers the first webhook of each of its partitions.
        for where in owned_by_a:
            [first] = await store_a.on_connection(
                lambda db, w=where: [
                    r for r in outbox_a.due(db, now_ms=2**62, limit=20, owned=[w]) if r.source.offset == 0
                ]
            )
            await store_a.on_connection(lambda db, d=first.delivery_id: outbox_a.remove(db, d))
        a.delivery_ended()

        async def committed() -> bool:
            done = await asyncio.to_thread(
                committed_offsets, kafka_settings.bootstrap_servers, settings.consumer_group, topic
            )
            return all(done.get(w.partition) == 1 for w in owned_by_a)

        await eventually(committed, "a's watermarks committed", 30, interval_s=0.05)
        await a.stop()
        await eventually(
            lambda: set(b.owned()) == set(partitions), "b owning every partition", 30, interval_s=0.05
        )
        left = await store_b.on_connection(lambda db: outbox_b.due(db, now_ms=2**62, limit=50))
        done = await asyncio.to_thread(
            committed_offsets, kafka_settings.bootstrap_servers, settings.consumer_group, topic
        )
        await b.stop()
        for store, _, _ in replicas:
            await store.close()
        return owned_by_a, set(b.owned()), done, [r.source for r in left if r.source is not None]

    owned_by_a, _, done, left = asyncio.run(scenario())
    # b dropped what a finished (offset 0 of a's partitions) and owes everything else.
    expected = {
        ReplySource(topic, p.partition, offset)
        for p in partitions
        for offset in ((1,) if p in owned_by_a else (0, 1))
    }
    assert set(left) == expected
    assert all(done[p.partition] == 1 for p in owned_by_a)
