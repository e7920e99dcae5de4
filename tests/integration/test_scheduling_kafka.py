"""Scheduling behaviour a user notices, on the real broker: aging, expiry while waiting, back-pressure."""

from __future__ import annotations

import asyncio
import time

import pytest

from inferq.messaging.codec import result_codec
from tests.support.inprocess import backend_stats, running_dispatcher, sim_backend, until_in_flight
from tests.support.kafka import a_request, committed_offsets, produce_requests, read_all
from tests.support.loop import in_loop

pytestmark = pytest.mark.kafka


def read_results(bootstrap: str, topic: str, expect: int, timeout_s: float = 60) -> list[dict]:
    return [
        result_codec().decode(m.value())
        for m in read_all(bootstrap, topic, expect=expect, timeout_s=timeout_s)
    ]


def run_aging(kafka_settings, promotion_age_s: float) -> list[dict]:
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    # Budget 4 at peak: HIGH 2 / MEDIUM 1 / LOW 0 guaranteed, one slot of headroom: under a steady
    # chat and analysis load LOW gets no slot at all unless it is promoted.
    high = [a_request("HIGH", deadline_ms=120_000) for _ in range(150)]
    medium = [a_request("MEDIUM", deadline_ms=120_000) for _ in range(40)]
    low = [a_request("LOW") for _ in range(2)]

    async def scenario():
        async with (
            sim_backend(speed=10.0, limit=4) as url,
            running_dispatcher(
                kafka_settings,
                url,
                budget=4,
                schedule_pin="peak",
                promotion_age_s=promotion_age_s,
                adaptive=False,
            ),
        ):
            produce_requests(bootstrap, topics.requests_by_name("LOW"), low)
            produce_requests(bootstrap, topics.requests_by_name("HIGH"), high)
            produce_requests(bootstrap, topics.requests_by_name("MEDIUM"), medium)
            return await asyncio.to_thread(read_results, bootstrap, topics.results, 192)

    return asyncio.run(scenario())


def test_starved_low_is_promoted_and_completes_while_chat_and_analysis_keep_coming(kafka_settings):
    results = run_aging(kafka_settings, promotion_age_s=1.0)
    assert len(results) == 192 and {r.status for r in results} == {"OK"}
    low_done = max(r.completed_at_ms for r in results if r.tier == "LOW")
    others_done = max(r.completed_at_ms for r in results if r.tier != "LOW")
    assert low_done < others_done, "LOW waited for the whole HIGH/MEDIUM load although it was promoted"


def test_without_aging_low_waits_for_the_load_to_end(kafka_settings):
    """The control run: the same load with an unreachable promotion age, so the test above can fail."""
    results = run_aging(kafka_settings, promotion_age_s=3600.0)
    low_started = min(r.dispatched_at_ms for r in results if r.tier == "LOW")
    others = sorted(r.dispatched_at_ms for r in results if r.tier != "LOW")
    assert low_started >= others[-5], "LOW got a slot while the higher tiers were saturating the budget"


@in_loop
async def test_requests_expire_while_waiting_and_never_reach_the_backend(kafka_settings):
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    analysis = a_request("MEDIUM")
    chats = [a_request("HIGH", deadline_ms=1_500) for _ in range(5)]

    async with sim_backend(speed=1.0, limit=1) as url, running_dispatcher(kafka_settings, url, budget=1):
        produce_requests(bootstrap, topics.requests_by_name("MEDIUM"), [analysis])
        await until_in_flight(url, 1)
        # The only slot is taken by a 2.8 s analysis: chat with 1.5 s to live cannot be served.
        produce_requests(bootstrap, topics.requests_by_name("HIGH"), chats)
        results = await asyncio.to_thread(read_results, bootstrap, topics.results, 6)
        stats = await backend_stats(url)
    by_id = {r.request_id: r for r in results}
    analysed = by_id[analysis.request_id]
    assert analysed.status == "OK"
    for chat in chats:
        outcome = by_id[chat.request_id]
        assert outcome.status == "EXPIRED"
        assert outcome.dispatched_at_ms is None
        # Answered by the expiry timer while waiting, not when the slot finally came free.
        assert outcome.completed_at_ms < analysed.completed_at_ms
    assert stats["total"] == 1


@in_loop
async def test_backlog_waits_in_kafka_not_in_memory(kafka_settings):
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    group = f"{kafka_settings.topic_prefix}-dispatcher"
    briefs = [a_request("LOW") for _ in range(3000)]

    async with (
        sim_backend(speed=10.0) as url,
        running_dispatcher(kafka_settings, url, budget=2, readahead_per_tier=20) as dispatcher,
    ):
        produce_requests(bootstrap, topics.requests_by_name("LOW"), briefs)
        samples = []
        # Not a wait: the test samples the dispatcher's health over a fixed 5 s of backlog.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            samples.append(dispatcher.health())
            await asyncio.sleep(0.1)
        committed = committed_offsets(bootstrap, group, topics.requests_by_name("LOW"))
    assert max(s["held_by_tier"]["LOW"] for s in samples) <= 20
    assert max(s["paused_partitions"] for s in samples) >= 1
    done = sum(max(0, o) for o in committed.values())
    assert 0 < done < 500, f"{done} of 3000 processed: the backlog should still be in Kafka"


@in_loop
async def test_waiting_low_is_evicted_while_chat_is_over_capacity(kafka_settings):
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    briefs = [a_request("LOW") for _ in range(30)]
    chats = [a_request("HIGH", deadline_ms=120_000) for _ in range(60)]

    async with (
        sim_backend(speed=5.0, limit=2) as url,
        running_dispatcher(
            kafka_settings,
            url,
            budget=2,
            schedule_pin="peak",
            evict_low_under_pressure=True,
            pressure_capacity={"HIGH": 5},
            adaptive=False,
        ),
    ):
        produce_requests(bootstrap, topics.requests_by_name("LOW"), briefs)
        await until_in_flight(url, 1)
        produce_requests(bootstrap, topics.requests_by_name("HIGH"), chats)
        results = await asyncio.to_thread(read_results, bootstrap, topics.results, 90, 90)
    by_tier: dict[str, list[str]] = {}
    for r in results:
        by_tier.setdefault(r.tier, []).append(r.status)
    assert by_tier["HIGH"] == ["OK"] * 60
    evicted = [r for r in results if r.status == "EVICTED"]
    assert evicted, "no brief was evicted although chat was over its capacity"
    assert all(r.tier == "LOW" and r.dispatched_at_ms is None for r in evicted)
    assert "batch delayed" in evicted[0].error
    assert len(by_tier["LOW"]) == 30  # every brief has exactly one answer: OK or EVICTED
