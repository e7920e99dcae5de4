"""The backend client's errors are short reasons: no host, no URL, no body, no key. They become a
FAILED result's `error`, a dead-letter header and log lines. Against a local HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from inferq.dispatcher.backend import ChatBackend
from inferq.dispatcher.errors import BackendError
from tests.support.inprocess import free_port
from tests.support.loop import in_loop

PROMPT = "please keep this prompt private 4417"
API_KEY = "sk-never-shown-9931"


@contextlib.asynccontextmanager
async def serving(handler: web.RequestHandler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def failure_from(handler: web.RequestHandler, timeout_s: float = 5.0) -> BackendError:
    async with serving(handler) as url:
        backend = ChatBackend(url, api_key=API_KEY, max_connections=2)
        try:
            with pytest.raises(BackendError) as caught:
                await backend.complete("m", [{"role": "user", "content": PROMPT}], {}, timeout_s=timeout_s)
        finally:
            await backend.close()
    return caught.value


def assert_clean(error: BackendError) -> None:
    text = str(error)
    for leak in (PROMPT, API_KEY, "127.0.0.1", "http", "/v1"):
        assert leak not in text, f"{leak!r} in {text!r}"
    assert len(text) < 80


async def echo(request: web.Request, status: int) -> web.Response:
    body = await request.json()
    return web.Response(status=status, text=f"upstream said no to {json.dumps(body)}")


@pytest.mark.parametrize(("status", "retriable"), [(503, True), (500, True), (429, True), (400, False)])
def test_an_error_status_is_named_without_the_body(status: int, retriable: bool) -> None:
    async def handler(request: web.Request) -> web.Response:
        return await echo(request, status)

    error = asyncio.run(failure_from(handler))
    assert str(error) == f"backend answered {status}"
    assert (error.status, error.retriable) == (status, retriable)
    assert_clean(error)


def test_an_openai_error_object_gives_its_type_not_its_message() -> None:
    async def handler(request: web.Request) -> web.Response:
        message = f"'{(await request.json())['messages'][0]['content']}' is not allowed"
        error = {"error": {"message": message, "type": "invalid_request_error"}}
        return web.json_response(error, status=400)

    error = asyncio.run(failure_from(handler))
    assert str(error) == "backend answered 400 (invalid_request_error)"
    assert_clean(error)


def test_an_error_type_that_is_free_text_is_left_out() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": {"type": f"bad {PROMPT}"}}, status=400)

    error = asyncio.run(failure_from(handler))
    assert str(error) == "backend answered 400"


def test_an_unreadable_200_body_is_named_by_its_kind() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=f"not json {PROMPT}")

    error = asyncio.run(failure_from(handler))
    assert str(error) == "backend answered 200 with an unreadable body (JSONDecodeError)"
    assert error.retriable


def test_a_timeout_says_how_long() -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(1.0)
        return web.Response(text="{}")

    error = asyncio.run(failure_from(handler, timeout_s=0.2))
    assert str(error) == "backend timed out after 0.2 s"
    assert error.timed_out


@in_loop
async def test_a_refused_connection_does_not_name_the_host() -> None:
    backend = ChatBackend(f"http://127.0.0.1:{free_port()}/v1", api_key=API_KEY, max_connections=1)
    try:
        with pytest.raises(BackendError) as caught:
            await backend.complete("m", [{"role": "user", "content": PROMPT}], {}, timeout_s=2.0)
    finally:
        await backend.close()
    error = caught.value
    assert str(error) == "connection refused"
    assert error.retriable
    assert_clean(error)


def test_a_nonsense_retry_after_is_ignored() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "-5"})

    assert asyncio.run(failure_from(handler)).retry_after_s is None
