"""Retries against the simulated backend's outage switch: OK after retries, FAILED + dead letter,
EXPIRED when the deadline comes first, invalid input dead-lettered at once (no call)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from inferq.messaging.codec import result_codec
from tests.support.inprocess import backend_stats, running_dispatcher, sim_backend
from tests.support.kafka import a_request, produce_requests, read_all
from tests.support.loop import in_loop

pytestmark = pytest.mark.kafka


async def set_outage(url: str, on: bool) -> None:
    async with httpx.AsyncClient() as client:
        (await client.post(f"{url}/admin/faults", json={"outage": on})).raise_for_status()


def outcomes(bootstrap: str, topic: str, expect: int) -> dict[str, dict]:
    records = read_all(bootstrap, topic, expect=expect, timeout_s=60)
    return {r.request_id: r for r in (result_codec().decode(m.value()) for m in records)}


@in_loop
async def test_short_outage_ends_ok_after_retries_and_long_one_fails_with_a_dead_letter(kafka_settings):
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    survivors = [a_request("MEDIUM") for _ in range(4)]
    doomed = [a_request("MEDIUM") for _ in range(3)]

    async with (
        sim_backend(speed=20.0) as url,
        running_dispatcher(kafka_settings, url, max_attempts=3, retry_base_backoff_s=0.2, adaptive=False),
    ):
        await set_outage(url, True)
        produce_requests(bootstrap, topics.requests_by_name("MEDIUM"), doomed)
        # Three attempts, about a second apart (Retry-After: 1): the outage outlasts them all.
        first = await asyncio.to_thread(outcomes, bootstrap, topics.results, 3)
        produce_requests(bootstrap, topics.requests_by_name("MEDIUM"), survivors)
        await asyncio.sleep(0.5)
        await set_outage(url, False)
        rest = await asyncio.to_thread(outcomes, bootstrap, topics.results, 7)
        dead = await asyncio.to_thread(read_all, bootstrap, topics.dlq, expect=3)
        stats = await backend_stats(url)
    for request in doomed:
        result = first[request.request_id]
        assert result.status == "FAILED"
        assert result.attempts == 3
        assert "503" in result.error
    for request in survivors:
        result = rest[request.request_id]
        assert result.status == "OK"
        assert result.attempts >= 2
    assert len(dead) == 3
    headers = dict(dead[0].headers())
    assert headers["inferq.attempts"] == b"3"
    assert headers["inferq.status"] == b"503"
    assert {m.key().decode() for m in dead} == {r.request_id for r in doomed}
    assert stats["by_status"]["503"] >= 3 * 3


@in_loop
async def test_interactive_request_expires_rather_than_fails_in_an_outage(kafka_settings):
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    chats = [a_request("HIGH", deadline_ms=2_000) for _ in range(3)]

    async with (
        sim_backend(speed=20.0) as url,
        running_dispatcher(kafka_settings, url, max_attempts=10, adaptive=False),
    ):
        await set_outage(url, True)
        produce_requests(bootstrap, topics.requests_by_name("HIGH"), chats)
        results = await asyncio.to_thread(outcomes, bootstrap, topics.results, 3)
    assert {results[c.request_id].status for c in chats} == {"EXPIRED"}


@in_loop
async def test_invalid_input_is_dead_lettered_at_once_without_a_call(kafka_settings):
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    # A producer writing straight to Kafka with a role the chat-completions API refuses: the
    # dispatcher's record rules refuse it before any call (services/dispatcher/record_rules.py).
    bad = a_request("HIGH", messages=[{"role": "robot", "content": "beep"}])

    async with sim_backend(speed=20.0) as url, running_dispatcher(kafka_settings, url):
        produce_requests(bootstrap, topics.requests_by_name("HIGH"), [bad])
        result = await asyncio.to_thread(outcomes, bootstrap, topics.results, 1)
        dead = await asyncio.to_thread(read_all, bootstrap, topics.dlq, expect=1)
        stats = await backend_stats(url)
    assert result[bad.request_id].status == "FAILED"
    assert result[bad.request_id].attempts == 1
    assert "role" in result[bad.request_id].error
    assert len(dead) == 1 and b"not a chat role" in dict(dead[0].headers())["inferq.error"]
    assert stats["total"] == 0  # never sent to the LLM
