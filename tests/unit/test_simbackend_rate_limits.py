"""The simulated backend's requests and tokens per minute (--rpm, --tpm): 429 past them with
OpenAI's headers, and the x-ratelimit-* headers on every 200 too."""

from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from inferq.dispatcher.rate_budget import parse_duration_s, read_headers
from inferq.tools.simbackend import SimBackendSettings, create_app
from inferq.tools.simbackend.rate_limits import MinuteLimits, openai_duration
from tests.support.clock import ManualClock

CHAT = "/v1/chat/completions"


@pytest.fixture(autouse=True)
def _no_sim_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("INFERQ_SIM_"):
            monkeypatch.delenv(name)


async def no_sleep(_: float) -> None:
    return None


def test_openai_durations_read_back_by_the_dispatcher() -> None:
    for seconds, text in ((0.02, "20ms"), (1.0, "1s"), (1.5, "1.5s"), (360.0, "6m0s"), (61.25, "1m1.25s")):
        assert openai_duration(seconds) == text
        assert parse_duration_s(text) == pytest.approx(seconds)


def test_the_minute_refuses_past_either_limit_and_frees_as_it_moves_on() -> None:
    clock = ManualClock(now_s=100.0)
    limits = MinuteLimits(rpm=3, tpm=100, clock=clock.seconds)
    assert limits.refusal(60) is None
    limits.count(60)
    assert limits.refusal(41) == "tokens"
    clock.advance(s=10)
    limits.count(40)
    limits.count(0)
    assert limits.refusal(0) == "requests"
    assert limits.retry_after_s(41) == 50  # when the first call (60 tokens) leaves the minute
    assert limits.headers() == {
        "x-ratelimit-limit-requests": "3",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "50s",
        "x-ratelimit-limit-tokens": "100",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "50s",
    }
    clock.advance(s=50)
    assert limits.refusal(60) is None


def test_without_limits_no_headers_are_sent() -> None:
    assert MinuteLimits(rpm=None, tpm=None).headers() == {}


async def calls(settings: SimBackendSettings, n: int) -> tuple[list[httpx.Response], dict[str, object]]:
    app = create_app(settings, sleep=no_sleep)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        body = {
            "model": "inferq-fast",
            "messages": [{"role": "user", "content": "x" * 400}],
            "max_tokens": 20,
        }
        answers = [await client.post(CHAT, json=body) for _ in range(n)]
        stats = (await client.get("/stats")).json()
    return answers, stats


def test_over_the_token_limit_the_simulator_answers_429_with_openais_headers() -> None:
    answers, stats = asyncio.run(asyncio.wait_for(calls(SimBackendSettings(tpm=300), 4), 10))
    # Each call: 100 prompt tokens and an answer of at most 20: two fit in 300, the third does not.
    assert [a.status_code for a in answers] == [200, 200, 429, 429]
    first = read_headers(answers[0].headers)
    assert first.limit_tokens == 300
    assert first.remaining_tokens is not None and first.remaining_tokens < 300
    refused = answers[2]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    seen = read_headers(refused.headers)
    assert seen.remaining_tokens is not None and seen.remaining_tokens < 120
    assert seen.retry_after_s is not None and 1 <= seen.retry_after_s <= 60
    assert seen.reset_tokens_s is not None
    assert stats["rate_limited"] == 2


def test_over_the_requests_limit_the_simulator_answers_429() -> None:
    answers, stats = asyncio.run(asyncio.wait_for(calls(SimBackendSettings(rpm=2), 3), 10))
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert read_headers(answers[2].headers).remaining_requests == 0
    assert stats["rate_limited"] == 1


def test_limits_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_SIM_TPM", "5000")
    monkeypatch.setenv("INFERQ_SIM_RPM", "60")
    settings = SimBackendSettings()
    assert (settings.tpm, settings.rpm) == (5000, 60)
    monkeypatch.setenv("INFERQ_SIM_TPM", "0")
    with pytest.raises(ValueError, match="tpm"):
        SimBackendSettings()
