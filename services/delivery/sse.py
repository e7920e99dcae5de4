"""Server-Sent Events and waits that end when the client goes away.

`EventStreamResponse` streams an async iterator of events and watches the connection while it does:
when the client disconnects, the iterator is cancelled at once (its ``finally`` and ``with`` blocks
run, so a waiter it holds is unregistered), even if no event was due to be written. Starlette does
this for ASGI servers below spec 2.4 only; here it holds on every server. `until_disconnected` does
the same for a handler that waits before answering once (the long poll, a chat completion).

`follow` is the one loop both event streams (ingest's chat completions, the results service's
``/events``) read a waiter with: the bound, the keep-alive comments, the chunks in order (repeats
dropped, an answer that started over marked `Restarted`) and, when asked, the stream gone idle. Each
endpoint only writes the steps in its own format.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from inferq.delivery.hub import ChunkOrder, ChunkTracker, Waiter
from inferq.messaging.records import InferenceChunk, InferenceResult

T = TypeVar("T")

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    # Proxies (nginx) must pass each event on as it comes.
    "X-Accel-Buffering": "no",
}


def sse_event(data: Any, *, event: str | None = None) -> bytes:
    """One event: an optional ``event:`` line and the JSON of `data` on one ``data:`` line (JSON
    escapes newlines, so one line always suffices)."""
    body = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {body}\n\n".encode()


def sse_comment(text: str) -> bytes:
    """A comment line: keeps a quiet connection alive through proxies; clients ignore it."""
    return f": {text}\n\n".encode()


# Written on a quiet stream: proxies keep the connection, and a client that left is noticed.
KEEPALIVE = sse_comment("waiting")


@dataclass(frozen=True)
class Restarted:
    """The first chunk of an answer that started over (a retry): the text before it is void."""

    chunk: InferenceChunk


@dataclass(frozen=True)
class Gapped:
    """A chunk after one that never came (lost: chunks are transient): the text has a hole there,
    which only the result fills."""

    chunk: InferenceChunk


class Stopped(Enum):
    """Why `follow` ended without an outcome."""

    # The stream's bound passed.
    BOUND = "bound"
    # No chunk for `idle_s` after the first one (a dispatcher died mid-answer).
    IDLE = "idle"


Step = bytes | InferenceChunk | Restarted | Gapped | InferenceResult | Stopped


async def follow(
    waiter: Waiter,
    *,
    bound_s: float,
    keepalive_s: float,
    idle_s: float | None = None,
    from_start: bool = False,
) -> AsyncIterator[Step]:
    """What `waiter` receives within `bound_s`, in order: `KEEPALIVE` (bytes, to write as they are)
    after each `keepalive_s` without news, each new chunk (`Restarted` for one that starts the answer
    over, `Gapped` for one after a lost chunk; repeats are dropped), and last either the
    `InferenceResult` or why it stopped (`Stopped`; `IDLE` only with `idle_s`: that long without a
    chunk once one came). `from_start`: the waiter was there before the answer began
    (`ChunkTracker`)."""
    loop = asyncio.get_running_loop()
    ends_at = loop.time() + bound_s
    tracker = ChunkTracker(from_start=from_start)
    last_chunk_at: float | None = None
    while (left := ends_at - loop.time()) > 0:
        wait_s = min(left, keepalive_s)
        if idle_s is not None and last_chunk_at is not None:
            idle_left = last_chunk_at + idle_s - loop.time()
            if idle_left <= 0:
                yield Stopped.IDLE
                return
            wait_s = min(wait_s, idle_left)
        item = await waiter.next(wait_s)
        if item is None:
            yield KEEPALIVE
        elif isinstance(item, InferenceResult):
            yield item
            return
        else:
            order = tracker.accept(item)
            if order is ChunkOrder.REPEAT:
                continue
            last_chunk_at = loop.time()
            if order is ChunkOrder.RESTART:
                yield Restarted(item)
            elif order is ChunkOrder.GAP:
                yield Gapped(item)
            else:
                yield item
    yield Stopped.BOUND


class EventStreamResponse(Response):
    """``text/event-stream`` from `events`; the client's disconnect cancels the stream. `on_close`
    runs once the response is over, however it ended."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[bytes],
        *,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._events = events
        self._on_close = on_close
        self.status_code = status_code
        self.background = None
        self.init_headers(SSE_HEADERS | (headers or {}))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = asyncio.ensure_future(self._stream(send))
        watch = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({stream, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stream, watch):
                task.cancel()
            for task in (stream, watch):
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await task
            # The iterator's cleanup runs now, not whenever the garbage collector gets to it.
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(RuntimeError):
                    await aclose()
            # What the stream holds is released even if the stream never started.
            if self._on_close is not None:
                self._on_close()

    async def _stream(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        async for event in self._events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class ClientGoneError(Exception):
    """The client disconnected while its answer was being waited for; nobody will read one."""


# The status logged for an answer nobody receives (nginx's "client closed request").
CLIENT_GONE_STATUS = 499


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s value; `ClientGoneError` as soon as the client disconnects (`work` is then
    cancelled, as it is when the caller is cancelled). The request's body must have been read."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            raise ClientGoneError
        return task.result()
    finally:
        for pending in (task, watch):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
