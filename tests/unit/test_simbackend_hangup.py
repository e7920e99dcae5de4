"""The simulated backend's hang-up modes: a call whose client goes away frees its slot at once
(`free`, as vLLM or TGI) or holds it to its natural end (`keep`, as a hosted API), sync and streamed.

In process through httpx's ASGI transport (a hang-up is the request cancelled; the sleep is injected,
so the test decides how far a call got), then over a real socket under uvicorn (a hang-up is the
connection closed, which the server reports as ``http.disconnect``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from inferq.tools.simbackend import SimBackendSettings, create_app
from inferq.tools.simbackend.cli import register, settings_from_args
from inferq.tools.simbackend.hangup import OnHangup
from tests.support.clock import ManualClock
from tests.support.inprocess import backend_stats, sim_backend, until_in_flight
from tests.support.waiting import eventually
from tests.unit.test_simbackend import GatedSleep, run_async

CHAT = "/v1/chat/completions"
ANSWER_TOKENS = 10
# A question whose answer is longer than ANSWER_TOKENS, so every answer is exactly that long.
LONG = {
    "model": "inferq-fast",
    "messages": [{"role": "user", "content": "tell me " * 40}],
    "max_tokens": ANSWER_TOKENS,
}
STREAMED = {**LONG, "stream": True}


@contextlib.asynccontextmanager
async def backend(
    on_hangup: OnHangup, sleep: GatedSleep, clock: ManualClock | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    settings = SimBackendSettings(limit=1, on_hangup=on_hangup)
    app = create_app(settings, sleep=sleep, clock=(clock or ManualClock(0)).seconds)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        yield client


async def hang_up(call: asyncio.Task[httpx.Response]) -> None:
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def stats(client: httpx.AsyncClient) -> dict[str, Any]:
    body: dict[str, Any] = (await client.get("/stats")).json()
    return body


# --- in process -------------------------------------------------------------------------------------------


def test_free_a_hung_up_sync_call_frees_its_slot_at_once_with_the_tokens_it_had_generated() -> None:
    clock = ManualClock(0)
    latency_s = SimBackendSettings().latency_s["inferq-fast"]

    async def scenario() -> tuple[dict[str, Any], httpx.Response, dict[str, Any]]:
        sleep = GatedSleep()
        async with backend(OnHangup.FREE, sleep, clock) as client:
            abandoned = asyncio.create_task(client.post(CHAT, json=LONG))
            await sleep.until_entered(1)
            clock.advance(s=latency_s * 0.4)
            await hang_up(abandoned)
            after_hangup = await stats(client)
            # With limit 1 this call would be a 429 if the abandoned one still held the slot.
            admitted = asyncio.create_task(client.post(CHAT, json=LONG))
            await sleep.until_entered(2)
            sleep.open()
            return after_hangup, await admitted, await stats(client)

    after_hangup, admitted, final = run_async(scenario)

    assert after_hangup["in_flight"] == 0
    assert after_hangup["abandoned"] == 1
    assert after_hangup["abandoned_tokens"] == int(ANSWER_TOKENS * 0.4)
    assert after_hangup["on_hangup"] == "free"
    assert admitted.status_code == 200
    assert admitted.json()["usage"]["completion_tokens"] == ANSWER_TOKENS
    assert final["abandoned"] == 1, "a call answered in full is not abandoned"
    assert final["by_status"] == {"200": 1}, "the abandoned call was never answered"
    assert final["completed_tokens"] == ANSWER_TOKENS, "only the admitted call's tokens were completed"


def test_keep_a_hung_up_sync_call_holds_its_slot_until_its_natural_end() -> None:
    async def scenario() -> tuple[dict[str, Any], int, dict[str, Any], int]:
        sleep = GatedSleep()
        async with backend(OnHangup.KEEP, sleep) as client:
            abandoned = asyncio.create_task(client.post(CHAT, json=LONG))
            await sleep.until_entered(1)
            await hang_up(abandoned)
            after_hangup = await stats(client)
            refused = (await client.post(CHAT, json=LONG)).status_code
            sleep.open()  # the abandoned call's latency ends
            ended = await eventually(
                lambda: stats(client), "the abandoned call ends", done=lambda s: s["in_flight"] == 0
            )
            return after_hangup, refused, ended, (await client.post(CHAT, json=LONG)).status_code

    after_hangup, refused, ended, later = run_async(scenario)

    assert after_hangup["in_flight"] == 1
    assert after_hangup["abandoned"] == 1
    assert after_hangup["on_hangup"] == "keep"
    assert refused == 429
    assert ended["abandoned"] == 1
    # Answered when it ended, as a hosted API bills it, though nobody read the answer.
    assert ended["by_status"] == {"429": 1, "200": 1}
    assert ended["completed_tokens"] == ANSWER_TOKENS
    assert later == 200


def test_free_a_hung_up_stream_stops_generating_and_frees_its_slot() -> None:
    generated = 3

    async def scenario() -> tuple[dict[str, Any], int, int, int]:
        # Pauses 1-3 pass (three tokens generated), the fourth holds: the client hangs up there.
        sleep = GatedSleep(free_steps=generated)
        async with backend(OnHangup.FREE, sleep) as client:
            abandoned = asyncio.create_task(client.post(CHAT, json=STREAMED))
            await sleep.until_entered(generated + 1)
            await hang_up(abandoned)
            after_hangup = await stats(client)
            paused = len(sleep.calls)
            sleep.open()
            admitted = await client.post(CHAT, json=LONG)
            return after_hangup, admitted.status_code, paused, len(sleep.calls)

    after_hangup, admitted, paused, pauses_after = run_async(scenario)

    assert after_hangup["in_flight"] == 0
    assert after_hangup["abandoned"] == 1
    assert after_hangup["abandoned_tokens"] == generated
    assert admitted == 200
    assert pauses_after == paused + 1, "only the new call paused: the abandoned stream generated no more"


def test_keep_a_hung_up_stream_generates_to_its_end_holding_its_slot() -> None:
    generated = 3

    async def scenario() -> tuple[dict[str, Any], int, dict[str, Any], int]:
        sleep = GatedSleep(free_steps=generated)
        async with backend(OnHangup.KEEP, sleep) as client:
            abandoned = asyncio.create_task(client.post(CHAT, json=STREAMED))
            await sleep.until_entered(generated + 1)
            await hang_up(abandoned)
            after_hangup = await stats(client)
            refused = (await client.post(CHAT, json=LONG)).status_code
            sleep.open()
            ended = await eventually(
                lambda: stats(client), "the abandoned stream ends", done=lambda s: s["in_flight"] == 0
            )
            return after_hangup, refused, ended, len(sleep.calls)

    after_hangup, refused, ended, pauses = run_async(scenario)

    assert after_hangup["in_flight"] == 1
    assert after_hangup["abandoned"] == 1
    assert after_hangup["abandoned_tokens"] == generated
    assert refused == 429
    assert pauses == ANSWER_TOKENS, "the abandoned stream generated every token, unread"
    assert ended["abandoned"] == 1
    assert ended["completed_tokens"] == ANSWER_TOKENS


@pytest.mark.parametrize("on_hangup", list(OnHangup))
def test_a_stream_read_to_its_end_is_not_abandoned(on_hangup: OnHangup) -> None:
    async def scenario() -> tuple[httpx.Response, dict[str, Any]]:
        sleep = GatedSleep(free_steps=1_000)
        async with backend(on_hangup, sleep) as client:
            return await client.post(CHAT, json=STREAMED), await stats(client)

    response, final = run_async(scenario)

    assert response.text.endswith("data: [DONE]\n\n")
    assert (final["abandoned"], final["abandoned_tokens"], final["in_flight"]) == (0, 0, 0)
    assert final["completed_tokens"] == ANSWER_TOKENS


def test_the_mode_comes_from_env_or_option_and_a_bad_value_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    for name in [n for n in os.environ if n.startswith("INFERQ_SIM_")]:
        monkeypatch.delenv(name)

    assert SimBackendSettings().on_hangup is OnHangup.KEEP
    monkeypatch.setenv("INFERQ_SIM_ON_HANGUP", "free")
    assert SimBackendSettings().on_hangup is OnHangup.FREE
    assert settings_from_args(parser.parse_args(["sim-backend"])).on_hangup is OnHangup.FREE
    assert (
        settings_from_args(parser.parse_args(["sim-backend", "--on-hangup", "keep"])).on_hangup
        is OnHangup.KEEP
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["sim-backend", "--on-hangup", "sometimes"])
    monkeypatch.setenv("INFERQ_SIM_ON_HANGUP", "sometimes")
    with pytest.raises(ValidationError):
        SimBackendSettings()


# --- over a socket, under uvicorn ---------------------------------------------------------------------------


async def hang_up_on_server(url: str, body: dict[str, Any]) -> None:
    """Start `body`'s call, wait until the backend runs it, then close the connection."""
    client = httpx.AsyncClient(timeout=30)
    call = asyncio.create_task(client.post(f"{url}{CHAT}", json=body))
    await until_in_flight(url, 1, timeout_s=5)
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    await client.aclose()


@pytest.mark.parametrize("body", [LONG, STREAMED], ids=["sync", "streamed"])
@pytest.mark.parametrize("on_hangup", list(OnHangup))
def test_a_closed_connection_is_a_hang_up_under_uvicorn(body: dict[str, Any], on_hangup: OnHangup) -> None:
    async def scenario() -> tuple[dict[str, Any], int]:
        # 60 s a call: in this test no call ends on its own.
        async with sim_backend(limit=1, on_hangup=on_hangup, latency_s={"inferq-fast": 60.0}) as url:
            await hang_up_on_server(url, body)
            seen = await eventually(
                lambda: backend_stats(url), "the hang-up is counted", done=lambda s: s["abandoned"] == 1
            )
            # Counted and freed in one step with free; with keep, counted and still running.
            async with httpx.AsyncClient(timeout=30) as client:
                after = asyncio.create_task(client.post(f"{url}{CHAT}", json=LONG))
                if on_hangup is OnHangup.KEEP:
                    return seen, (await after).status_code
                # Admitted: it runs (60 s) in the slot the abandoned call freed; the test ends there.
                await until_in_flight(url, 1, timeout_s=5)
                after.cancel()
                return seen, 0

    seen, next_call = asyncio.run(scenario())

    if on_hangup is OnHangup.FREE:
        assert seen["in_flight"] == 0
        assert next_call == 0
    else:
        assert seen["in_flight"] == 1
        assert next_call == 429
