"""The client over HTTP against a scripted server (httpx.MockTransport): answers and refusals as
typed results and errors, long poll detected (and polling when the results service has none), the
stream's fallback to one chunk, the sync wrapper."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest

from inferq.client import (
    EvictedError,
    ExpiredError,
    FailedError,
    HttpTransport,
    InferqClient,
    InvalidRequestError,
    NotAuthorizedError,
    RefusedError,
    RejectedError,
    SyncInferqClient,
    WaitTimeoutError,
)
from inferq.messaging.records import Status
from tests.support.loop import in_loop

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


@in_loop
async def test_stream_asks_for_chunks_and_reads_the_events_then_the_outcome() -> None:
    sse = (
        'event: chunk\ndata: {"request_id": "s1", "attempt": 1, "seq": 0, "delta": "hel", "model": "m"}\n\n'
        ": waiting\n\n"
        'event: restart\ndata: {"request_id": "s1", "attempt": 2}\n\n'
        'event: chunk\ndata: {"request_id": "s1", "attempt": 2, "seq": 0, "delta": "hi ", "model": "m"}\n\n'
        'event: chunk\ndata: {"request_id": "s1", "attempt": 2, "seq": 1, "delta": "there", "model": "m"}\n\n'
        "event: result\ndata: " + json.dumps(VIEW | {"request_id": "s1", "output": "hi there"}) + "\n\n"
    )
    posted: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            posted.append(json.loads(request.content))
            return accepted(request)
        assert request.url.path == "/v1/requests/s1/events"
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})

    c, _ = client(handler)

    async with c.stream("realtime_chat", "hi", request_id="s1") as stream:
        seen = [(chunk.delta, chunk.restart) async for chunk in stream]
    text = stream.text
    output = stream.outcome.output if stream.outcome else None
    assert seen == [("hel", False), ("hi ", True), ("there", False)]
    assert text == output == "hi there"
    assert posted[0]["stream"] is True


def test_a_stream_whose_outcome_failed_raises_its_error() -> None:
    sse = "event: result\ndata: " + json.dumps(VIEW | {"status": "FAILED", "error": "backend 500"}) + "\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return accepted(request) if request.method == "POST" else httpx.Response(200, text=sse)

    c, _ = client(handler)

    async def go() -> None:
        async for _ in c.stream("realtime_chat", "hi"):
            pass

    with pytest.raises(FailedError, match="backend 500"):
        asyncio.run(go())


@pytest.mark.parametrize("old", ["ingest", "results"])
@in_loop
async def test_stream_against_services_from_before_streaming_gives_one_chunk(old: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            if old == "ingest" and json.loads(request.content).get("stream"):
                problem = {"field": "stream", "problem": "Extra inputs are not permitted"}
                return httpx.Response(422, json={"error": "invalid", "problems": [problem]})
            return accepted(request)
        if request.url.path.endswith("/events"):
            return httpx.Response(404, json={"error": "not found"})
        return httpx.Response(200, json=VIEW | {"request_id": request.url.path.rsplit("/", 1)[1]})

    c, _ = client(handler)

    async with c.stream("realtime_chat", "hi") as stream:
        deltas = [chunk.delta async for chunk in stream]
    assert (deltas, stream.outcome.output if stream.outcome else None) == (["hello"], "hello")


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


@pytest.mark.parametrize(
    ("status", "error"),
    [
        ("FAILED", FailedError),
        ("REJECTED", RejectedError),
        ("EXPIRED", ExpiredError),
        ("EVICTED", EvictedError),
    ],
)
def test_each_terminal_status_raises_its_own_error(status: str, error: type[Exception]) -> None:
    """The client names a REJECTED outcome as ingest's HTTP answer does (403 rejected), not as a
    backend failure; a RejectedError is still a FailedError for code that caught that."""
    view = VIEW | {"status": status, "error": "not entitled"}

    def handler(request: httpx.Request) -> httpx.Response:
        return accepted(request) if request.method == "POST" else httpx.Response(200, json=view)

    c, _ = client(handler)
    with pytest.raises(error) as raised:
        asyncio.run(c.infer("realtime_chat", "hi", timeout=5))
    assert type(raised.value) is error
    if status == "REJECTED":
        assert isinstance(raised.value, FailedError)


def test_an_outcome_cut_by_max_tokens_says_length_with_the_backends_usage_and_fingerprint() -> None:
    """The results service's view of what the backend said reaches the client's Outcome, and back."""
    usage = {
        "prompt_tokens": 4,
        "completion_tokens": 3,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    view = VIEW | {
        "usage": usage,
        "finish_reason": "length",
        "system_fingerprint": "fp_44709d6fcb",
        "timings": {},
    }
    c, _ = client(lambda request: httpx.Response(200, json=view))
    outcome = asyncio.run(c.result("r1", timeout=5))
    assert (outcome.finish_reason, outcome.system_fingerprint) == ("length", "fp_44709d6fcb")
    assert outcome.usage == usage
    assert outcome.to_json() == view
    # A results service from before: none of them, nothing else changes.
    old = asyncio.run(client(lambda request: httpx.Response(200, json=VIEW))[0].result("r1", timeout=5))
    assert (old.finish_reason, old.system_fingerprint, old.output) == (None, None, "hello")
