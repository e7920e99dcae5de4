"""The dispatcher against the real broker: outcomes on the reply topic, commits after results."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferq.messaging.codec import result_codec
from tests.support.inprocess import backend_stats, running_dispatcher, sim_backend, until_in_flight
from tests.support.kafka import a_request, committed_offsets, end_offsets, produce, produce_requests, read_all
from tests.support.loop import in_loop
from tests.support.waiting import eventually

pytestmark = pytest.mark.kafka


def results_by_id(bootstrap: str, topic: str, expect: int) -> dict[str, dict]:
    records = read_all(bootstrap, topic, expect=expect, timeout_s=40)
    decoded = [result_codec().decode(m.value()) for m in records]
    return {r.request_id: r for r in decoded}


def test_requests_of_every_tier_complete_ok_on_the_reply_topic(kafka_settings):
    topics = kafka_settings.topics
    sent = {tier: [a_request(tier) for _ in range(4)] for tier in ("HIGH", "MEDIUM", "LOW")}

    async def scenario():
        async with sim_backend(speed=50.0) as url, running_dispatcher(kafka_settings, url, budget=4):
            for tier, records in sent.items():
                produce_requests(kafka_settings.bootstrap_servers, topics.requests_by_name(tier), records)
            results = await asyncio.to_thread(
                results_by_id, kafka_settings.bootstrap_servers, topics.results, 12
            )
            return results, await backend_stats(url)

    results, stats = asyncio.run(scenario())
    expected = {r.request_id: tier for tier, rs in sent.items() for r in rs}
    assert set(results) == set(expected)
    for rid, result in results.items():
        assert result.status == "OK", result
        assert result.tier == expected[rid]
        assert result.output
        assert result.dispatched_at_ms >= result.enqueued_at_ms
    assert stats["max_in_flight"] <= 4
    assert stats["by_status"].get("429", 0) == 0


@in_loop
async def test_expired_request_is_answered_expired_without_a_backend_call(kafka_settings):
    topics = kafka_settings.topics
    now = int(time.time() * 1000)
    expired = a_request("HIGH", created_at_ms=now - 10_000, expire_at_ms=now - 5_000)
    fresh = a_request("HIGH")

    async with sim_backend(speed=50.0) as url, running_dispatcher(kafka_settings, url):
        produce_requests(kafka_settings.bootstrap_servers, topics.requests_by_name("HIGH"), [expired, fresh])
        results = await asyncio.to_thread(results_by_id, kafka_settings.bootstrap_servers, topics.results, 2)
        stats = await backend_stats(url)
    assert results[expired.request_id].status == "EXPIRED"
    assert results[expired.request_id].dispatched_at_ms is None
    assert results[fresh.request_id].status == "OK"
    assert stats["total"] == 1  # only the fresh request reached the LLM


@in_loop
async def test_poison_record_goes_to_dlq_and_the_partition_moves_on(kafka_settings):
    topics = kafka_settings.topics
    good = [a_request("MEDIUM") for _ in range(3)]

    async with sim_backend(speed=50.0) as url, running_dispatcher(kafka_settings, url):
        bootstrap = kafka_settings.bootstrap_servers
        produce(bootstrap, topics.requests_by_name("MEDIUM"), [b"not avro at all"], partition=0)
        produce_requests(bootstrap, topics.requests_by_name("MEDIUM"), good, partition=0)
        results = await asyncio.to_thread(results_by_id, bootstrap, topics.results, 3)
        dead = await asyncio.to_thread(read_all, bootstrap, topics.dlq, expect=1)
    assert {r.request_id for r in good} == set(results)
    assert len(dead) == 1
    assert dead[0].value() == b"not avro at all"
    headers = dict(dead[0].headers())
    assert b"Avro single-object marker" in headers["inferq.error"]
    assert headers["inferq.source.offset"] == b"0"


@in_loop
async def test_offsets_are_committed_only_after_results_are_written(kafka_settings):
    topics = kafka_settings.topics
    group = f"{kafka_settings.topic_prefix}-dispatcher"
    topic = topics.requests_by_name("LOW")
    records = [a_request("LOW") for _ in range(3)]

    # cheap model at speed 2: each call takes 2.5 s, long enough to look while they run
    async with (
        sim_backend(speed=2.0) as url,
        running_dispatcher(kafka_settings, url, budget=10, schedule_pin="night"),
    ):
        produce_requests(kafka_settings.bootstrap_servers, topic, records, partition=1)
        await until_in_flight(url, 3)
        await asyncio.sleep(0.5)  # several commit intervals pass while the calls run
        during = committed_offsets(kafka_settings.bootstrap_servers, group, topic)
        await asyncio.to_thread(results_by_id, kafka_settings.bootstrap_servers, topics.results, 3)
        await eventually(
            lambda: committed_offsets(kafka_settings.bootstrap_servers, group, topic).get(1),
            "offset 3 committed on partition 1",
            10,
            interval_s=0.1,
            done=lambda offset: offset == 3,
        )
    assert during.get(1, -1001) < 1, f"committed {during.get(1)} while all three calls were still running"


@in_loop
async def test_work_completed_beyond_the_commit_is_not_redone_by_the_next_owner(kafka_settings):
    topics = kafka_settings.topics
    topic = topics.requests_by_name("HIGH")
    # One partition: a slow call at the head, five quick ones behind it that finish first.
    slow = a_request("HIGH", deadline_ms=120_000, model="inferq-cheap")
    quick = [a_request("HIGH", deadline_ms=120_000) for _ in range(5)]

    async with sim_backend(speed=1.0) as url:
        async with running_dispatcher(kafka_settings, url, drain_timeout_s=1.0, schedule_pin="night"):
            produce_requests(kafka_settings.bootstrap_servers, topic, [slow, *quick], partition=2)
            await asyncio.to_thread(results_by_id, kafka_settings.bootstrap_servers, topics.results, 5)
            # Leaving now: after the 1 s drain bound the slow call is abandoned, offset 0 stays
            # uncommitted, 1-5 are done.
        first_stats = await backend_stats(url)
        async with running_dispatcher(kafka_settings, url):
            results = await asyncio.to_thread(
                results_by_id, kafka_settings.bootstrap_servers, topics.results, 6
            )
        first = first_stats
        final = await backend_stats(url)
    # Calls are counted when they end; the abandoned slow one may still be running in the backend.
    assert first["total"] + first["in_flight"] == 6
    assert final["total"] + final["in_flight"] == 7, "the next owner called the LLM again for answered work"
    assert set(results) == {r.request_id for r in [slow, *quick]}
    assert results[slow.request_id].status == "OK"


def test_a_rebalance_that_gives_partitions_back_does_not_redo_running_calls(kafka_settings):
    from confluent_kafka import Consumer

    topics = kafka_settings.topics
    group = f"{kafka_settings.topic_prefix}-dispatcher"
    briefs = [a_request("LOW") for _ in range(6)]

    async def scenario():
        async with (
            # A brief takes 8 s: longer than the rebalance, which waits for the member's next heartbeat.
            sim_backend(latency_s={"inferq-cheap": 8.0}) as url,
            # A session of 10 s, not the default 2: a stall of this shared machine past 2 s drops the
            # member (its partitions lost, their calls rightly made again), which is not this test's case.
            running_dispatcher(
                kafka_settings, url, schedule_pin="night", session_timeout_ms=10_000
            ) as dispatcher,
        ):
            produce_requests(kafka_settings.bootstrap_servers, topics.requests_by_name("LOW"), briefs)
            await until_in_flight(url, 6)
            # Another member joins the group for an unrelated topic: the eager rebalance revokes all
            # of the dispatcher's partitions and hands them straight back.
            other = Consumer({"bootstrap.servers": kafka_settings.bootstrap_servers, "group.id": group})
            other.subscribe([topics.dlq])
            try:
                async with asyncio.timeout(30):
                    while not other.assignment():
                        await asyncio.to_thread(other.poll, 0.2)
                results = await asyncio.to_thread(
                    results_by_id, kafka_settings.bootstrap_servers, topics.results, 6
                )
                stats = await backend_stats(url)  # a redone call would be in flight now
                assert dispatcher.health()["assigned"] > 0
                return results, stats
            finally:
                await asyncio.to_thread(other.close)

    results, stats = asyncio.run(scenario())
    assert {r.status for r in results.values()} == {"OK"}
    assert stats["total"] + stats["in_flight"] == 6, "calls running during the rebalance were made again"


@in_loop
async def test_every_partition_is_committed_even_one_that_never_had_a_record(kafka_settings):
    topics = kafka_settings.topics
    group = f"{kafka_settings.topic_prefix}-dispatcher"
    bootstrap = kafka_settings.bootstrap_servers
    drained = [*topics.all_requests, topics.retry]
    request = a_request("HIGH")

    async with sim_backend(speed=50.0) as url, running_dispatcher(kafka_settings, url):
        produce_requests(bootstrap, topics.requests_by_name("HIGH"), [request], partition=0)
        await asyncio.to_thread(results_by_id, bootstrap, topics.results, 1)
        await eventually(
            lambda: all(committed_offsets(bootstrap, group, t) == end_offsets(bootstrap, t) for t in drained),
            "offsets committed to the end of every request and retry topic",
            15,
            interval_s=0.2,
        )

    # Without a commit, a partition's group offset reads "none" (-1001) even though nothing is owed.


@in_loop
async def test_calls_cut_by_their_deadline_keep_their_tokens_so_the_backend_never_answers_429(kafka_settings):
    # The backend takes 2 s a chat and keeps running a call whose client gave up; each request has
    # less than its 1 s deadline left when it starts. Were a token given back at the deadline, the next start
    # would be a call more than the backend's limit of 3, answered 429.
    topics = kafka_settings.topics
    budget = 3

    async with (
        sim_backend(limit=budget, latency_s={"inferq-fast": 2.0}) as url,
        running_dispatcher(
            kafka_settings, url, budget=budget, early_drop=False, backend_timeout_s=10.0
        ) as dispatcher,
    ):
        sent = []
        for _ in range(6):  # waves of short-lived chats, each wave more than the budget
            wave = [a_request("HIGH", deadline_ms=1000) for _ in range(2 * budget)]
            sent += wave
            produce_requests(kafka_settings.bootstrap_servers, topics.requests_by_name("HIGH"), wave)
            await asyncio.sleep(0.3)
        results = await asyncio.to_thread(
            results_by_id, kafka_settings.bootstrap_servers, topics.results, len(sent)
        )
        stats = await backend_stats(url)
        effective = dispatcher.effective_budget
    assert set(results) == {r.request_id for r in sent}
    assert {r.status for r in results.values()} == {"EXPIRED"}
    assert stats["total"] > 0, "no call reached the backend"
    assert stats["by_status"].get("429", 0) == 0
    assert stats["max_in_flight"] <= budget
    assert effective == budget
