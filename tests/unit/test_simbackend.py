"""The simulated LLM backend, driven in-process through httpx's ASGI transport with an injected sleep."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import httpx
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from inferq.tools.bench.recorder import marked_content
from inferq.tools.simbackend import DEFAULT_LATENCY_S, SimBackendSettings, create_app
from inferq.tools.simbackend.cli import register, run, settings_from_args
from inferq.tools.simbackend.latency_model import LatencyModel
from inferq.tools.simbackend.timings import CallTimings

CHAT = "/v1/chat/completions"
HELLO = {"model": "inferq-fast", "messages": [{"role": "user", "content": "hello there"}]}
TEST_TIMEOUT_S = 10.0

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _no_sim_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's INFERQ_SIM_* variables must not change what these tests see.
    for name in list(os.environ):
        if name.startswith("INFERQ_SIM_"):
            monkeypatch.delenv(name)


def run_async(test: Callable[[], Coroutine[Any, Any, T]]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(test(), TEST_TIMEOUT_S)

    return asyncio.run(bounded())


class RecordingSleep:
    """Records each requested latency and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


class GatedSleep(RecordingSleep):
    """Returns at once for the first `free_steps` pauses, then holds every pause until `open()`:
    the test decides concurrency (and how many tokens a call generates first), not the clock."""

    def __init__(self, free_steps: int = 0) -> None:
        super().__init__()
        self._free_steps = free_steps
        self._gate = asyncio.Event()
        self._entered = asyncio.Condition()

    async def __call__(self, seconds: float) -> None:
        async with self._entered:
            self.calls.append(seconds)
            self._entered.notify_all()
        if len(self.calls) > self._free_steps:
            await self._gate.wait()

    def open(self) -> None:
        self._gate.set()

    async def until_entered(self, count: int) -> None:
        async with asyncio.timeout(5), self._entered:
            await self._entered.wait_for(lambda: len(self.calls) >= count)


def client_for(settings: SimBackendSettings, sleep: Callable[[float], Awaitable[None]]) -> httpx.AsyncClient:
    app = create_app(settings, sleep=sleep)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim")


def chat(model: str = "inferq-fast", content: str = "hello there") -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": content}]}


# --- protocol ---------------------------------------------------------------------------------------------


def test_completion_has_the_openai_shape() -> None:
    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, json=HELLO)

    response = run_async(scenario)

    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "inferq-fast"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "sim reply to: hello there", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0
    assert usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_reply_quotes_the_last_user_message_and_honours_max_tokens() -> None:
    long_question = "why is the sky blue and the sea green and the grass never purple"
    conversation = {
        "model": "inferq-accurate",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "text", "text": long_question}]},
        ],
    }

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            full = await client.post(CHAT, json=conversation)
            cut = await client.post(CHAT, json={**conversation, "max_tokens": 2})
            return full, cut

    full, cut = run_async(scenario)

    assert full.json()["choices"][0]["message"]["content"] == "sim reply to: " + long_question[:40]
    cut_choice = cut.json()["choices"][0]
    assert cut_choice["finish_reason"] == "length"
    assert cut.json()["usage"]["completion_tokens"] == 2
    assert len(cut_choice["message"]["content"]) < len(full.json()["choices"][0]["message"]["content"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": HELLO["messages"]}, "model"),
        ({**HELLO, "model": ""}, "model"),
        ({**HELLO, "model": 7}, "model"),
        ({"model": "inferq-fast"}, "messages"),
        ({**HELLO, "messages": []}, "messages"),
        ({**HELLO, "messages": [{"content": "no role"}]}, "messages[0].role"),
        ({**HELLO, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({**HELLO, "max_tokens": "5"}, "max_tokens"),
        ({**HELLO, "temperature": 3.0}, "temperature"),
        ({**HELLO, "stream": "yes"}, "stream"),
        ({**HELLO, "stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ],
)
def test_bad_body_is_400_naming_the_field(body: dict[str, object], param: str) -> None:
    sleep = RecordingSleep()

    async def scenario() -> tuple[httpx.Response, dict[str, Any]]:
        async with client_for(SimBackendSettings(), sleep) as client:
            response = await client.post(CHAT, json=body)
            return response, (await client.get("/stats")).json()

    response, stats = run_async(scenario)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert f"'{param}'" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    assert sleep.calls == [], "an invalid call must not run"
    assert stats["by_status"] == {"400": 1}


@pytest.mark.parametrize("raw", [b"{not json", b"[]", b""])
def test_body_that_is_not_a_json_object_is_400(raw: bytes) -> None:
    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, content=raw, headers={"content-type": "application/json"})

    response = run_async(scenario)

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["param"] is None


# --- concurrency limit ------------------------------------------------------------------------------------


def test_calls_beyond_the_limit_get_429_at_once_and_never_run() -> None:
    limit, extra = 10, 5
    settings = SimBackendSettings(limit=limit, retry_after_s=2)

    async def scenario() -> tuple[list[httpx.Response], GatedSleep, dict[str, Any]]:
        sleep = GatedSleep()
        async with client_for(settings, sleep) as client:
            body = chat("inferq-cheap")
            calls = [asyncio.create_task(client.post(CHAT, json=body)) for _ in range(limit + extra)]
            await sleep.until_entered(limit)
            # The rejected calls finish while the admitted ones are still held inside their latency.
            early = []
            for finished in asyncio.as_completed(calls, timeout=5):
                early.append(await finished)
                if len(early) == extra:
                    break
            assert [r.status_code for r in early] == [429] * extra
            sleep.open()
            responses = await asyncio.gather(*calls)
            return responses, sleep, (await client.get("/stats")).json()

    responses, sleep, stats = run_async(scenario)

    rejected = [r for r in responses if r.status_code == 429]
    assert len(rejected) == extra
    assert sum(r.status_code == 200 for r in responses) == limit
    assert all(r.headers["Retry-After"] == "2" for r in rejected)
    assert all(r.json()["error"]["code"] == "rate_limit_exceeded" for r in rejected)
    assert len(sleep.calls) == limit, "a 429 call must never run"
    assert stats["max_in_flight"] == limit
    assert stats["in_flight"] == 0
    assert stats["limit"] == limit
    assert stats["total"] == limit + extra
    assert stats["by_status"] == {"200": limit, "429": extra}
    assert stats["by_model"] == {"inferq-cheap": limit + extra}


# --- latency ----------------------------------------------------------------------------------------------


def test_latency_per_model_divided_by_speed() -> None:
    sleep = RecordingSleep()
    models = ["inferq-fast", "inferq-accurate", "inferq-cheap", "someone-elses-model", "slow-one"]

    async def scenario() -> None:
        settings = SimBackendSettings(speed=10, latency_s={"slow-one": 30.0})
        async with client_for(settings, sleep) as client:
            for model in models:
                assert (await client.post(CHAT, json=chat(model))).status_code == 200

    run_async(scenario)

    assert sleep.calls == pytest.approx([0.05, 0.28, 0.5, 0.1, 3.0])


def test_default_sleep_really_waits() -> None:
    # Only a lower bound: a slow machine may take longer, but an unwired sleep would not take this long.
    settings = SimBackendSettings(speed=10)  # inferq-fast: 0.05 s
    app = create_app(settings)

    async def scenario() -> float:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            started = time.monotonic()
            assert (await client.post(CHAT, json=HELLO)).status_code == 200
            return time.monotonic() - started

    assert run_async(scenario) >= 0.045


def test_jitter_stays_within_its_fraction_and_follows_the_seed() -> None:
    model = LatencyModel(latency_s={"m": 1.0}, jitter=0.1)

    def draws(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [model.seconds("m", in_flight=1, degradation=1.0, rng=rng) for _ in range(500)]

    first = draws(3)
    assert all(0.9 <= seconds <= 1.1 for seconds in first)
    assert max(first) - min(first) > 0.1, "jitter should actually spread latencies"
    assert draws(3) == first
    assert draws(4) != first


def test_latency_grows_past_the_optimal_concurrency_point() -> None:
    model = LatencyModel(latency_s={"m": 2.0}, optimal_concurrency=4, slope=0.5)
    rng = random.Random(0)

    assert model.seconds("m", in_flight=1, degradation=1.0, rng=rng) == 2.0
    assert model.seconds("m", in_flight=4, degradation=1.0, rng=rng) == 2.0
    assert model.seconds("m", in_flight=6, degradation=1.0, rng=rng) == pytest.approx(4.0)
    assert model.seconds("m", in_flight=6, degradation=3.0, rng=rng) == pytest.approx(12.0)


def test_concurrent_calls_past_the_optimal_point_are_slower() -> None:
    settings = SimBackendSettings(optimal_concurrency=2, slope=1.0)

    async def scenario() -> list[float]:
        sleep = GatedSleep()
        async with client_for(settings, sleep) as client:
            calls = [asyncio.create_task(client.post(CHAT, json=HELLO)) for _ in range(4)]
            await sleep.until_entered(4)
            sleep.open()
            await asyncio.gather(*calls)
        return sleep.calls

    assert run_async(scenario) == pytest.approx([0.5, 0.5, 1.0, 1.5])


def test_degradation_changes_latency_at_runtime() -> None:
    sleep = RecordingSleep()

    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), sleep) as client:
            await client.post(CHAT, json=HELLO)
            faults = await client.post("/admin/faults", json={"degradation": 3.0})
            await client.post(CHAT, json=HELLO)
            return faults

    faults = run_async(scenario)

    assert faults.json() == {"outage": False, "error_rate": 0.0, "degradation": 3.0, "stream_drop_rate": 0.0}
    assert sleep.calls == pytest.approx([0.5, 1.5])


# --- faults -----------------------------------------------------------------------------------------------


def test_outage_answers_503_at_once_until_switched_off() -> None:
    sleep = RecordingSleep()

    async def scenario() -> tuple[httpx.Response, dict[str, Any], httpx.Response]:
        async with client_for(SimBackendSettings(retry_after_s=3), sleep) as client:
            await client.post("/admin/faults", json={"outage": True})
            during = await client.post(CHAT, json=HELLO)
            stats = (await client.get("/stats")).json()
            await client.post("/admin/faults", json={"outage": False})
            return during, stats, await client.post(CHAT, json=HELLO)

    during, stats, after = run_async(scenario)

    assert during.status_code == 503
    assert during.headers["Retry-After"] == "3"
    assert during.json()["error"]["type"] == "server_error"
    assert stats["faults"]["outage"] is True
    assert stats["max_in_flight"] == 0
    assert after.status_code == 200
    assert len(sleep.calls) == 1, "an outage answers at once, without latency"


def test_error_rate_one_fails_every_call_after_its_latency() -> None:
    sleep = RecordingSleep()

    async def scenario() -> list[httpx.Response]:
        async with client_for(SimBackendSettings(error_rate=1.0, seed=1), sleep) as client:
            return [await client.post(CHAT, json=HELLO) for _ in range(20)]

    responses = run_async(scenario)

    assert {r.status_code for r in responses} == {500, 503}
    assert all(r.json()["error"]["type"] == "server_error" for r in responses)
    assert all("Retry-After" in r.headers for r in responses if r.status_code == 503)
    assert len(sleep.calls) == 20


def test_error_rate_is_reproducible_with_a_seed() -> None:
    def statuses(seed: int) -> list[int]:
        async def scenario() -> list[int]:
            async with client_for(SimBackendSettings(error_rate=0.5, seed=seed), RecordingSleep()) as client:
                return [(await client.post(CHAT, json=HELLO)).status_code for _ in range(30)]

        return run_async(scenario)

    first = statuses(7)
    assert 200 in first
    assert {500, 503} & set(first)
    assert statuses(7) == first


def test_admin_faults_rejects_bad_values_and_keeps_the_state() -> None:
    async def scenario() -> tuple[list[httpx.Response], dict[str, Any]]:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            bad = [
                await client.post("/admin/faults", json={"error_rate": 1.5}),
                await client.post("/admin/faults", json={"degradation": 0}),
                await client.post("/admin/faults", json={"error-rate": 1.0}),
                await client.post("/admin/faults", json={"outage": "yes"}),
            ]
            return bad, (await client.get("/stats")).json()

    bad, stats = run_async(scenario)

    assert [r.status_code for r in bad] == [400] * 4
    assert [r.json()["error"]["param"] for r in bad] == ["error_rate", "degradation", "error-rate", "outage"]
    assert stats["faults"] == {
        "outage": False,
        "error_rate": 0.0,
        "degradation": 1.0,
        "stream_drop_rate": 0.0,
    }


# --- auth, stats ------------------------------------------------------------------------------------------


def test_api_key_is_required_when_configured() -> None:
    key = "sk-sim-secret"

    async def scenario() -> dict[str, int]:
        async with client_for(SimBackendSettings(api_key=key), RecordingSleep()) as client:
            cases = {
                "missing": {},
                "wrong": {"Authorization": "Bearer sk-sim-wrong"},
                "not bearer": {"Authorization": f"Basic {key}"},
                "right": {"Authorization": f"Bearer {key}"},
                "lowercase scheme": {"Authorization": f"bearer {key}"},
            }
            results = {}
            for name, headers in cases.items():
                response = await client.post(CHAT, json=HELLO, headers=headers)
                assert key not in response.text
                results[name] = response.status_code
            results["healthz"] = (await client.get("/healthz")).status_code
            return results

    assert run_async(scenario) == {
        "missing": 401,
        "wrong": 401,
        "not bearer": 401,
        "right": 200,
        "lowercase scheme": 200,
        "healthz": 200,
    }


def test_stats_count_calls_and_reset_zeroes_them() -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any], httpx.Response]:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            await client.post(CHAT, json=chat("inferq-fast"))
            await client.post(CHAT, json=chat("inferq-cheap"))
            await client.post(CHAT, json={"model": "inferq-fast"})
            before = (await client.get("/stats")).json()
            await client.post("/admin/reset")
            return before, (await client.get("/stats")).json(), await client.get("/healthz")

    before, after, health = run_async(scenario)

    assert before["total"] == 3
    assert before["by_status"] == {"200": 2, "400": 1}
    assert before["by_model"] == {"inferq-fast": 1, "inferq-cheap": 1}
    assert before["max_in_flight"] == 1
    assert after == {
        "in_flight": 0,
        "max_in_flight": 0,
        "limit": 10,
        "total": 0,
        "by_status": {},
        "by_model": {},
        "streams_dropped": 0,
        "rate_limited": 0,
        "abandoned": 0,
        "abandoned_tokens": 0,
        "completed_tokens": 0,
        "faults": {"outage": False, "error_rate": 0.0, "degradation": 1.0, "stream_drop_rate": 0.0},
        "on_hangup": "keep",
    }
    assert health.json() == {"status": "ok"}


# --- settings and CLI -------------------------------------------------------------------------------------


def test_settings_come_from_inferq_sim_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_SIM_LIMIT", "3")
    monkeypatch.setenv("INFERQ_SIM_LATENCY_S", '{"inferq-fast": 0.2, "x": 9}')
    monkeypatch.setenv("INFERQ_SIM_API_KEY", "sk-env")
    monkeypatch.setenv("INFERQ_SIM_OPTIMAL_CONCURRENCY", "4")

    settings = SimBackendSettings()

    assert settings.limit == 3
    assert settings.latency_s == {**DEFAULT_LATENCY_S, "inferq-fast": 0.2, "x": 9.0}
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "sk-env"
    assert "sk-env" not in repr(settings)
    assert settings.optimal_concurrency == 4


def test_empty_api_key_env_means_no_auth(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_SIM_API_KEY", "")
    assert SimBackendSettings().api_key is None


def parse_cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="inferq")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_options_override_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_SIM_LIMIT", "7")
    monkeypatch.setenv("INFERQ_SIM_SPEED", "4")
    monkeypatch.setenv("INFERQ_SIM_API_KEY", "sk-env")
    monkeypatch.setenv("INFERQ_SIM_LATENCY_S", '{"inferq-cheap": 1.0}')

    args = parse_cli(
        ["sim-backend", "--limit", "3", "--latency", "inferq-fast=0.1", "--latency", "x=2", "--seed", "5"]
    )
    settings = settings_from_args(args)

    assert args.func is run
    assert (args.host, args.port) == ("127.0.0.1", 8780)
    assert settings.limit == 3
    assert settings.speed == 4.0, "an option not given keeps the environment's value"
    assert settings.seed == 5
    assert settings.latency_s == {**DEFAULT_LATENCY_S, "inferq-cheap": 1.0, "inferq-fast": 0.1, "x": 2.0}
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "sk-env"


def test_the_stream_drop_rate_comes_from_env_or_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_SIM_STREAM_DROP_RATE", "0.25")
    assert settings_from_args(parse_cli(["sim-backend"])).stream_drop_rate == 0.25
    assert settings_from_args(parse_cli(["sim-backend", "--stream-drop-rate", "1"])).stream_drop_rate == 1.0


@pytest.mark.parametrize("bad", ["inferq-fast", "=1", "inferq-fast=-1", "inferq-fast=soon"])
def test_cli_rejects_a_malformed_latency(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_cli(["sim-backend", "--latency", bad])
    assert exit_info.value.code == 2
    assert "MODEL=SECONDS" in capsys.readouterr().err


def test_cli_refuses_invalid_settings_before_serving(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_cli(["sim-backend", "--speed", "0", "--port", "1"])

    assert run(args) == 2
    assert "speed" in capsys.readouterr().err
    assert run(parse_cli(["sim-backend", "--stream-drop-rate", "1.5", "--port", "1"])) == 2
    assert "stream_drop_rate" in capsys.readouterr().err


# --- streaming --------------------------------------------------------------------------------------------


def sse_payloads(text: str) -> list[Any]:
    """The `data:` payloads of a server-sent event body, JSON-decoded except `[DONE]`."""
    events = [e for e in text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), events
    return [e[6:] if e[6:] == "[DONE]" else json.loads(e[6:]) for e in events]


def test_a_streamed_answer_is_openai_chunks_ending_with_done() -> None:
    body = {**HELLO, "stream": True, "stream_options": {"include_usage": True}}

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            plain = await client.post(CHAT, json=HELLO)
            return plain, await client.post(CHAT, json=body)

    plain, streamed = run_async(scenario)

    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    payloads = sse_payloads(streamed.text)
    assert payloads[-1] == "[DONE]"
    chunks, usage = payloads[:-2], payloads[-2]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == plain.json()["choices"][0]["message"]["content"]
    tokens = [c for c in chunks[1:-1] if c["choices"][0]["delta"].get("content")]
    assert len(tokens) == usage["usage"]["completion_tokens"] > 1
    assert usage["choices"] == []
    assert usage["usage"] == plain.json()["usage"]


def test_without_include_usage_no_usage_chunk_and_max_tokens_cuts_the_stream() -> None:
    body = {**HELLO, "stream": True, "max_tokens": 2}

    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, json=body)

    payloads = sse_payloads(run_async(scenario).text)

    assert payloads[-1] == "[DONE]"
    assert all(p["choices"] for p in payloads[:-1]), "no usage chunk unless asked"
    assert payloads[-2]["choices"][0]["finish_reason"] == "length"
    assert "".join(p["choices"][0]["delta"].get("content", "") for p in payloads[:-1]) == "sim repl"


def test_a_stream_takes_the_calls_latency_a_share_before_its_first_token() -> None:
    sleep = RecordingSleep()
    settings = SimBackendSettings(speed=2, stream_first_token_share=0.4)  # inferq-accurate: 1.4 s

    async def scenario() -> list[Any]:
        async with client_for(settings, sleep) as client:
            response = await client.post(CHAT, json={**chat("inferq-accurate"), "stream": True})
            return sse_payloads(response.text)

    payloads = run_async(scenario)

    tokens = [p for p in payloads[1:-2] if p["choices"][0]["delta"].get("content")]
    assert len(sleep.calls) == len(tokens)
    assert sleep.calls[0] == pytest.approx(1.4 * 0.4)
    assert sum(sleep.calls) == pytest.approx(1.4)
    assert len(set(map(round, sleep.calls[1:], [9] * (len(sleep.calls) - 1)))) == 1, "evenly spread"


def test_a_stream_holds_its_slot_until_its_last_event() -> None:
    async def scenario() -> tuple[int, int, int]:
        sleep = GatedSleep()
        async with client_for(SimBackendSettings(limit=1), sleep) as client:
            streaming = asyncio.create_task(client.post(CHAT, json={**HELLO, "stream": True}))
            await sleep.until_entered(1)
            refused = (await client.post(CHAT, json=HELLO)).status_code
            sleep.open()
            done = (await streaming).status_code
            return refused, done, (await client.get("/stats")).json()["in_flight"]

    assert run_async(scenario) == (429, 200, 0)


def test_a_dropped_stream_ends_after_some_tokens_without_done() -> None:
    app = create_app(SimBackendSettings(stream_drop_rate=1.0), sleep=RecordingSleep())
    # A drop breaks the connection: over ASGI the app's error is what the transport reports.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    async def scenario() -> tuple[str, dict[str, Any], httpx.Response]:
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            dropped = await client.post(CHAT, json={**HELLO, "stream": True})
            stats = (await client.get("/stats")).json()
            unstreamed = await client.post(CHAT, json=HELLO)
            return dropped.text, stats, unstreamed

    text, stats, unstreamed = run_async(scenario)

    payloads = sse_payloads(text)
    assert "[DONE]" not in payloads
    assert not any(p["choices"][0]["finish_reason"] for p in payloads)
    sent = "".join(p["choices"][0]["delta"].get("content", "") for p in payloads)
    assert 0 < len(sent) < len("sim reply to: hello there")
    assert stats["streams_dropped"] == 1
    assert stats["in_flight"] == 0
    assert unstreamed.status_code == 200, "only streams are dropped"


def test_stream_drop_rate_is_a_runtime_fault_and_follows_the_seed() -> None:
    def dropped(seed: int) -> list[bool]:
        app = create_app(SimBackendSettings(seed=seed), sleep=RecordingSleep())
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

        async def scenario() -> list[bool]:
            async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
                faults = await client.post("/admin/faults", json={"stream_drop_rate": 0.5})
                assert faults.json()["stream_drop_rate"] == 0.5
                bodies = [(await client.post(CHAT, json={**HELLO, "stream": True})).text for _ in range(30)]
                return ["[DONE]" not in body for body in bodies]

        return run_async(scenario)

    first = dropped(5)
    assert True in first and False in first
    assert dropped(5) == first


def test_stream_drop_rate_out_of_range_is_refused() -> None:
    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post("/admin/faults", json={"stream_drop_rate": 2})

    response = run_async(scenario)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stream_drop_rate"
    with pytest.raises(ValueError, match="stream_drop_rate"):
        SimBackendSettings(stream_drop_rate=-0.1)


# --- timings (the delivery benchmark) ---------------------------------------------------------------------


def test_marked_calls_are_timed_streamed_or_not_and_unmarked_ones_are_not() -> None:
    async def scenario() -> tuple[dict[str, list[int | None]], dict[str, list[int | None]]]:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            await client.post(CHAT, json=chat(content=marked_content("sync-1")))
            streamed = {**chat(content=marked_content("s-1")), "stream": True}
            async with client.stream("POST", CHAT, json=streamed) as r:
                assert [line async for line in r.aiter_lines() if line][-1] == "data: [DONE]"
            await client.post(CHAT, json=chat(content="no marker here"))
            before = (await client.get("/timings")).json()["timings"]
            await client.post("/admin/reset")
            return before, (await client.get("/timings")).json()["timings"]

    timings, after_reset = run_async(scenario)

    assert set(timings) == {"sync-1", "s-1"}
    received, first, done = timings["sync-1"]
    assert first is None and received is not None and done is not None and received <= done
    received, first, done = timings["s-1"]
    assert received is not None and first is not None and done is not None
    assert received <= first <= done
    assert after_reset == {}


def test_a_marked_calls_parameters_are_shown_as_received() -> None:
    sent = {"logit_bias": {"13": -5}, "metadata": {"app": "x"}, "verbosity": "low", "new": [1, {"a": 2}]}

    async def scenario() -> tuple[Any, int]:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            await client.post(CHAT, json=chat(content=marked_content("p-1")) | sent)
            shown = (await client.get("/received/p-1")).json()
            return shown, (await client.get("/received/nobody")).status_code

    shown, unknown = run_async(scenario)
    assert {k: shown[k] for k in sent} == sent and "messages" not in shown
    assert unknown == 404


def test_timings_keep_at_most_their_bound() -> None:
    timings = CallTimings(max_calls=2)
    for name in ("a", "b", "c"):
        timings.received({"messages": [{"role": "user", "content": marked_content(name)}]})
    assert set(timings.as_dict()) == {"a", "b"}


def test_a_cut_answer_says_length_with_usage_details_and_a_fingerprint_sync_and_streamed() -> None:
    """What inferq must pass through, sent as OpenAI sends it: the SDK's own types accept it."""
    conversation = {
        "model": "inferq-fast",
        "max_tokens": 3,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}],
    }
    streamed_body = {**conversation, "stream": True, "stream_options": {"include_usage": True}}

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, json=conversation), await client.post(CHAT, json=streamed_body)

    plain, streamed = run_async(scenario)

    completion = ChatCompletion.model_validate(plain.json())
    assert completion.choices[0].finish_reason == "length"
    assert completion.system_fingerprint == "fp_inferqsim01"
    usage = completion.usage
    assert usage is not None and usage.completion_tokens == 3
    # The system message is the history a prompt cache would hold: 8 characters, 2 tokens.
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 2
    assert (
        usage.completion_tokens_details is not None and usage.completion_tokens_details.reasoning_tokens == 0
    )
    payloads = sse_payloads(streamed.text)
    chunks = [ChatCompletionChunk.model_validate(p) for p in payloads[:-1]]
    assert {c.system_fingerprint for c in chunks} == {"fp_inferqsim01"}
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage == usage


# --- function calling and JSON output ----------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
CLOCK_TOOL = {"type": "function", "function": {"name": "clock"}}


def simulated(body: dict[str, object]) -> ChatCompletion:
    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, json=body)

    response = run_async(scenario)
    assert response.status_code == 200, response.text
    return ChatCompletion.model_validate(response.json())


def test_with_tools_the_user_turn_gets_a_call_of_the_first_tool_the_same_every_time() -> None:
    body = {**HELLO, "tools": [WEATHER_TOOL, CLOCK_TOOL]}
    first, again = simulated(body), simulated(body)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.function.name == "weather" and json.loads(call.function.arguments) == {"city": "sim"}
    assert again.choices[0].message.tool_calls == choice.message.tool_calls
    named = simulated({**body, "tool_choice": {"type": "function", "function": {"name": "clock"}}})
    assert [c.function.name for c in named.choices[0].message.tool_calls or []] == ["clock"]


def test_with_tools_a_stream_gives_the_call_in_openai_deltas_ending_tool_calls() -> None:
    body = {**HELLO, "tools": [WEATHER_TOOL, CLOCK_TOOL], "stream": True}

    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, json=body)

    response = run_async(scenario)
    assert response.status_code == 200, response.text
    payloads = sse_payloads(response.text)
    assert payloads[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(p) for p in payloads[:-1]]
    pieces = [d for c in chunks for d in c.choices[0].delta.tool_calls or []]
    assert len(pieces) > 2, "the arguments come in several pieces"
    first, *rest = pieces
    assert (first.index, first.type, first.function and first.function.name) == (0, "function", "weather")
    assert all(p.index == 0 and p.id is None and p.function and p.function.name is None for p in rest)
    arguments = "".join((p.function.arguments or "") if p.function else "" for p in pieces)
    assert json.loads(arguments) == {"city": "sim"}
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
    # The same call as unstreamed.
    [call] = simulated({**body, "stream": False}).choices[0].message.tool_calls or []
    assert (first.id, arguments) == (call.id, call.function.arguments)


def test_a_stream_of_two_choices_with_logprobs_interleaves_them_each_as_its_sync_answer() -> None:
    body = {**HELLO, "n": 2, "logprobs": True, "top_logprobs": 2, "stream": True}

    async def scenario() -> httpx.Response:
        async with client_for(SimBackendSettings(), RecordingSleep()) as client:
            return await client.post(CHAT, json=body)

    response = run_async(scenario)
    assert response.status_code == 200, response.text
    chunks = [ChatCompletionChunk.model_validate(p) for p in sse_payloads(response.text)[:-1]]
    unstreamed = simulated({**body, "stream": False})
    for index in (0, 1):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == index]
        assert "".join(c.delta.content or "" for c in mine) == unstreamed.choices[index].message.content
        assert mine[-1].finish_reason == unstreamed.choices[index].finish_reason
        entries = [e for c in mine if c.logprobs for e in c.logprobs.content or []]
        sync = unstreamed.choices[index].logprobs
        assert sync is not None and entries == sync.content
    # Interleaved: the second choice's text starts before the first's ends.
    order = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.content]
    assert order[:2] == [0, 1]


def test_tool_choice_none_or_a_tool_answer_last_gets_text() -> None:
    none = simulated({**HELLO, "tools": [WEATHER_TOOL], "tool_choice": "none"})
    assert none.choices[0].finish_reason == "stop" and none.choices[0].message.tool_calls is None
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    messages = [
        *HELLO["messages"],  # type: ignore[misc]
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees"},
    ]
    answered = simulated({**HELLO, "messages": messages, "tools": [WEATHER_TOOL]})
    assert answered.choices[0].finish_reason == "stop"
    assert answered.choices[0].message.content == "sim reply to: hello there"


def test_a_json_format_gets_json_and_a_schema_gets_its_required_properties() -> None:
    as_object = simulated({**HELLO, "response_format": {"type": "json_object"}})
    assert json.loads(as_object.choices[0].message.content or "") == {"reply": "hello there"}
    schema = {
        "type": "object",
        "properties": {
            "mood": {"type": "string", "enum": ["calm", "busy"]},
            "score": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "note": {"type": "string"},
        },
        "required": ["mood", "score", "tags"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "mood", "schema": schema, "strict": True}}
    shaped = simulated({**HELLO, "response_format": fmt})
    assert json.loads(shaped.choices[0].message.content or "") == {"mood": "calm", "score": 1.5, "tags": []}
