"""The token budget on the real broker against the simulated backend limited in tokens per minute
(its concurrency limit high enough not to bind): the dispatcher never sends a call past the
minute's tokens (no 429 from the simulator), and chat arriving after a brief dump is served within
the minute while the briefs keep to their share."""

from __future__ import annotations

import asyncio

import pytest

from inferq.messaging.codec import result_codec
from tests.support.inprocess import backend_stats, running_dispatcher, sim_backend
from tests.support.kafka import a_request, produce_requests, read_all
from tests.support.loop import in_loop

pytestmark = pytest.mark.kafka

# Ten chats (1200 tokens) fit; the twenty calls (2400) would not: without the rate budget, 429s.
TPM = 1500
# One model for every tier (each model has its own minute, at the simulator as at OpenAI).
MODEL = "inferq-fast"
PROMPT = "x" * 400  # 100 tokens, and an answer of at most 20: about 120 a call


@in_loop
async def test_token_limit_is_never_passed_and_chat_goes_before_the_brief_dump(kafka_settings):
    topics = kafka_settings.topics
    bootstrap = kafka_settings.bootstrap_servers
    messages = [{"role": "user", "content": PROMPT}]
    briefs = [
        a_request("LOW", deadline_ms=600_000, model=MODEL, messages=messages, params={"max_tokens": "20"})
        for _ in range(10)
    ]
    chats = [
        a_request("HIGH", deadline_ms=600_000, model=MODEL, messages=messages, params={"max_tokens": "20"})
        for _ in range(10)
    ]

    async with (
        sim_backend(speed=10.0, limit=100, tpm=TPM) as url,
        running_dispatcher(
            kafka_settings,
            url,
            budget=10,
            schedule_pin="peak",
            adaptive=False,
            rate_limits={MODEL: {"tpm": TPM}},
        ),
    ):
        produce_requests(bootstrap, topics.requests_by_name("LOW"), briefs)
        produce_requests(bootstrap, topics.requests_by_name("HIGH"), chats)
        # Every chat and the one brief LOW's share of the minute allows (a minute's tokens in
        # advance: the whole batch is priced at once, so a second brief would start with them).
        expect = len(chats) + 1
        results = await asyncio.to_thread(read_all, bootstrap, topics.results, expect=expect, timeout_s=20)
        await asyncio.sleep(2.0)  # starts past the limit would have reached the backend by now
        results, stats = [result_codec().decode(m.value()) for m in results], await backend_stats(url)
    assert stats["rate_limited"] == 0, stats
    assert "429" not in stats["by_status"]
    ok = {r.request_id for r in results if r.status == "OK"}
    assert {c.request_id for c in chats} <= ok, "a chat waited for the minute although HIGH keeps its share"
    low_started = stats["by_model"][MODEL] - len(chats)
    # LOW keeps to its 10% floor share at peak: 150 tokens, one call.
    assert low_started <= 1, stats
