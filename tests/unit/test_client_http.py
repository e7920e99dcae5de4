"""The client over HTTP against a scripted server (httpx.MockTransport): answers and refusals as
typed results and errors, long poll detected (and polling when the results service has none), the
stream's fallback to one chunk, the sync wrapper."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from services.client import (
    ExpiredError,
    HttpTransport,
    InferqClient,
    InvalidRequestError,
    NotAuthorizedError,
    RefusedError,
    SyncInferqClient,
    WaitTimeoutError,
)
from services.messaging.records import Status

Handler = Callable[[httpx.Request], httpx.Response]
VIEW = {"request_id": "r1", "status": "OK", "tier": "HIGH", "model": "fast", "attempts": 1, "output": "hello"}


def client(handler: Handler, **kwargs: object) -> tuple[InferqClient, HttpTransport]:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    transport = HttpTransport(
        "http://inferq", "iq_secret", http=http, poll_min_s=0.001, poll_max_s=0.01, **kwargs
    )  # type: ignore[arg-type]
    return InferqClient(transport), transport


def accepted(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    return httpx.Response(202, json={"request_id": body["request_id"], "tier": "LOW", "expire_at_ms": 2**41})


def test_submit_sends_the_body_and_the_key_and_returns_the_handle() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return accepted(request)

    c, _ = client(handler)
    handle = asyncio.run(c.submit("morning_brief", "brief", request_id="b-1", priority="low", deadline_ms=9))
    assert handle.request_id == "b-1" and handle.tier == "LOW"
    assert seen[0].headers["authorization"] == "Bearer iq_secret"
    assert json.loads(seen[0].content) == {
        "scenario": "morning_brief",
        "messages": [{"role": "user", "content": "brief"}],
        "request_id": "b-1",
        "priority": "LOW",
        "deadline_ms": 9,
    }


def test_submit_without_a_request_id_makes_one_up() -> None:
    c, _ = client(accepted)
    a = asyncio.run(c.submit("realtime_chat", "hi"))
    b = asyncio.run(c.submit("realtime_chat", "hi"))
    assert a.request_id != b.request_id


@pytest.mark.parametrize(
    ("status", "body", "headers", "error"),
    [
        (429, {"error": "tier LOW is full"}, {"retry-after": "7"}, RefusedError),
        (503, {"error": "Kafka did not answer"}, {"retry-after": "1"}, RefusedError),
        (
            422,
            {"error": "invalid", "problems": [{"field": "messages", "problem": "required"}]},
            {},
            InvalidRequestError,
        ),
        (413, {"error": "too large"}, {}, InvalidRequestError),
        (401, {"error": "unknown key"}, {}, NotAuthorizedError),
        (403, {"error": "not entitled"}, {}, NotAuthorizedError),
    ],
)
def test_refusals_are_typed(
    status: int, body: dict[str, object], headers: dict[str, str], error: type[Exception]
) -> None:
    c, _ = client(lambda _: httpx.Response(status, json=body, headers=headers))
    with pytest.raises(error) as raised:
        asyncio.run(c.submit("realtime_chat", "hi"))
    if isinstance(raised.value, RefusedError):
        assert raised.value.retry_after_s == float(headers["retry-after"])
    if status == 422:
        assert raised.value.problems == [{"field": "messages", "problem": "required"}]  # type: ignore[attr-defined]
    assert "iq_secret" not in str(raised.value)


def test_a_garbage_retry_after_is_none() -> None:
    c, _ = client(lambda _: httpx.Response(429, text="busy", headers={"retry-after": "soon"}))
    with pytest.raises(RefusedError) as raised:
        asyncio.run(c.submit("realtime_chat", "hi"))
    assert raised.value.retry_after_s is None


def test_result_long_polls_and_the_status_becomes_the_error() -> None:
    asked: list[str] = []
    answers = iter(
        [
            httpx.Response(202, json={"status": "PENDING"}),
            httpx.Response(200, json=VIEW | {"status": "EXPIRED"}),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("wait", ""))
        return next(answers)

    c, transport = client(handler)
    with pytest.raises(ExpiredError) as raised:
        asyncio.run(c.result("r1", timeout=100))
    assert raised.value.outcome.status is Status.EXPIRED
    assert transport.long_poll is True
    assert asked[0] == "30"  # one long poll is cut to the largest the service takes


def test_a_results_service_without_long_poll_is_polled() -> None:
    asked: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("wait"))
        if len(asked) < 4:
            return httpx.Response(404, json={"error": "no result (yet)"})
        return httpx.Response(200, json=VIEW)

    c, transport = client(handler)
    outcome = asyncio.run(c.result("r1", timeout=100))
    assert outcome.output == "hello"
    assert transport.long_poll is False
    assert asked[0] == "30" and asked[1:] == [None, None, None]


def test_result_times_out_with_a_typed_error() -> None:
    c, _ = client(lambda _: httpx.Response(404, json={"error": "none"}))
    with pytest.raises(WaitTimeoutError) as raised:
        asyncio.run(c.result("r1", timeout=0.05))
    assert raised.value.request_id == "r1"
    assert isinstance(raised.value, TimeoutError)


def test_stream_falls_back_to_one_chunk_without_chat_completions() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            return httpx.Response(404, json={"error": "not found"})
        if request.url.path == "/v1/requests":
            return accepted(request)
        return httpx.Response(200, json=VIEW | {"request_id": request.url.path.rsplit("/", 1)[1]})

    c, _ = client(handler)

    async def go() -> tuple[list[str], str | None]:
        async with c.stream("realtime_chat", "hi") as stream:
            deltas = [chunk.delta async for chunk in stream]
        return deltas, stream.outcome.output if stream.outcome else None

    assert asyncio.run(go()) == (["hello"], "hello")


def test_stream_reads_openai_chunks_then_the_outcome() -> None:
    sse = (
        'data: {"choices": [{"delta": {"role": "assistant"}}]}\n\n'
        'data: {"choices": [{"delta": {"content": "hel"}}]}\n\n'
        ": keep-alive\n\n"
        'data: {"choices": [{"delta": {"content": "lo"}}]}\n\n'
        "data: [DONE]\n\n"
    )
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            sent.append(request)
            return httpx.Response(200, text=sse, headers={"x-inferq-request-id": "chatcmpl-1"})
        assert request.url.path == "/v1/requests/chatcmpl-1"
        return httpx.Response(200, json=VIEW | {"request_id": "chatcmpl-1"})

    c, _ = client(handler)

    async def go() -> tuple[list[str], str]:
        stream = c.stream("emotion_analysis", "hi", priority="HIGH", deadline_ms=5000)
        return [chunk.delta async for chunk in stream], stream.text

    assert asyncio.run(go()) == (["hel", "lo"], "hello")
    assert sent[0].headers["x-inferq-scenario"] == "emotion_analysis"
    assert sent[0].headers["x-inferq-priority"] == "HIGH"
    assert json.loads(sent[0].content)["stream"] is True


def test_the_sync_client_does_the_same_calls() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return accepted(request)
        return httpx.Response(200, json=VIEW)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    with SyncInferqClient(HttpTransport("http://inferq", http=http)) as sync:
        assert sync.infer("realtime_chat", "hi").output == "hello"
        assert sync.submit("batch", "x", request_id="q").request_id == "q"
    with pytest.raises(Exception, match="closed"):
        sync.result("r1")
