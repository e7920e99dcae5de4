"""The backend client's streamed calls: server-sent events read as they come, against a local HTTP
server; a stream that breaks or ends early is a retriable failure named without host, body or key."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from inferq.dispatcher.backend import ChatBackend, Completion
from inferq.dispatcher.errors import BackendError
from inferq.messaging.records import Choice
from tests.unit.test_dispatcher_backend_errors import API_KEY, PROMPT, assert_clean, serving


def chunk(content: str | None = None, *, finish: str | None = None) -> dict[str, object]:
    delta = {} if content is None else {"content": content}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "served-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


USAGE = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def sse(*payloads: object) -> bytes:
    return b"".join(
        b"data: " + (p if isinstance(p, bytes) else json.dumps(p).encode()) + b"\n\n" for p in payloads
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def streaming(*parts: bytes, seen: list[dict[str, object]] | None = None) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        if seen is not None:
            seen.append(await request.json())
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for part in parts:
            await response.write(part)
        await response.write_eof()
        return response

    return handler


async def call(handler: Handler, pieces: list[str], timeout_s: float = 5.0) -> Completion:
    async with serving(handler) as url:
        backend = ChatBackend(url, api_key=API_KEY, max_connections=2)
        try:
            return await backend.stream(
                "m",
                [{"role": "user", "content": PROMPT}],
                {"temperature": 0.5},
                timeout_s=timeout_s,
                on_delta=lambda delta: pieces.append(delta.content) if delta.content else None,
            )
        finally:
            await backend.close()


def failure(handler: Handler, pieces: list[str] | None = None, timeout_s: float = 5.0) -> BackendError:
    with pytest.raises(BackendError) as caught:
        asyncio.run(call(handler, pieces if pieces is not None else [], timeout_s))
    assert_clean(caught.value)
    return caught.value


def test_a_stream_hands_over_each_piece_in_order_and_returns_the_whole_answer() -> None:
    seen: list[dict[str, object]] = []
    body = sse(
        {**chunk(""), "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        chunk("Hel"),
        chunk("lo"),
        chunk(finish="stop"),
        USAGE,
        b"[DONE]",
    )
    # A comment line, an event name and a CRLF: allowed by the SSE standard, ignored.
    handler = streaming(b": keep-alive\r\n\r\nevent: message\r\n", body, seen=seen)
    pieces: list[str] = []

    completion = asyncio.run(call(handler, pieces))

    assert pieces == ["Hel", "lo"]
    assert completion == Completion(
        "Hello", "served-model", 3, 2, 5, finish_reason="stop", choices=(Choice(0, "Hello", "stop"),)
    )
    (sent,) = seen
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["temperature"] == 0.5


def test_an_event_split_over_several_writes_is_read_whole() -> None:
    body = sse(chunk("split"), b"[DONE]")
    pieces: list[str] = []
    completion = asyncio.run(call(streaming(*(body[i : i + 7] for i in range(0, len(body), 7))), pieces))
    assert pieces == ["split"]
    assert completion.output == "split"


def test_a_stream_that_ends_without_done_is_a_retriable_failure_after_its_pieces() -> None:
    pieces: list[str] = []
    error = failure(streaming(sse(chunk("par"), chunk("tial"))), pieces)
    assert str(error) == "backend stream ended before [DONE]"
    assert error.retriable
    assert pieces == ["par", "tial"], "what arrived was handed over before the failure"


def test_a_dropped_connection_mid_stream_is_a_retriable_failure() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(sse(chunk("before ")))
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()  # no terminating chunk: the body is cut
        return response

    pieces: list[str] = []
    error = failure(handler, pieces)
    assert error.retriable
    assert pieces == ["before "]


def test_an_error_event_mid_stream_gives_its_type_not_its_message() -> None:
    leak = {"error": {"message": f"cannot continue {PROMPT}", "type": "server_error"}}
    error = failure(streaming(sse(chunk("a"), leak)))
    assert str(error) == "backend sent an error mid-stream (server_error)"
    assert error.retriable


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (PROMPT.encode(), "not JSON"),
        (b"[1, 2]", "not an object"),
        (json.dumps({"choices": [{"delta": "text"}]}).encode(), "AttributeError"),
        (json.dumps({"choices": 5}).encode(), "TypeError"),
    ],
)
def test_an_unreadable_event_is_named_by_its_kind(event: bytes, reason: str) -> None:
    error = failure(streaming(sse(event, b"[DONE]")))
    assert reason in str(error)
    assert error.retriable


def test_an_error_status_before_the_stream_is_the_same_as_unstreamed() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": PROMPT, "type": "rate_limit"}}, status=429)

    error = failure(handler)
    assert str(error) == "backend answered 429 (rate_limit)"
    assert error.retriable


def test_a_stream_slower_than_its_timeout_times_out() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(sse(chunk("slow")))
        await asyncio.sleep(2)
        return response

    error = failure(handler, timeout_s=0.3)
    assert error.timed_out and error.retriable
