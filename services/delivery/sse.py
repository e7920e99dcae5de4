"""Server-Sent Events and waits that end when the client goes away.

`EventStreamResponse` streams an async iterator of events and watches the connection while it does:
when the client disconnects, the iterator is cancelled at once (its ``finally`` and ``with`` blocks
run, so a waiter it holds is unregistered), even if no event was due to be written. Starlette does
this for ASGI servers below spec 2.4 only; here it holds on every server. `until_disconnected` does
the same for a handler that waits before answering once (the long poll, a chat completion).

`follow` is the one loop both event streams (ingest's chat completions, the results service's
``/events``) read a waiter with: the bound, the keep-alive comments, the chunks in order (repeats
dropped, an answer that started over marked `Restarted`, one after a lost chunk `Gapped`) and, when
asked, the stream gone idle. Chunks and results travel on different topics, so an OK result may be
read before the last chunks: until the chunks seen cover the result (`_Covered`), `follow` waits up
to `CHUNK_SETTLE_S` for the rest before it yields the result. Each endpoint only writes the steps
in its own format.
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
from inferq.messaging.records import InferenceChunk, InferenceResult, Status

T = TypeVar("T")

# How long an OK result waits for chunks still on their way once it is read (they are written before
# it, but on another topic: usually one fetch behind, longer across a mirror).
CHUNK_SETTLE_S = 0.5

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
    settle_s: float = CHUNK_SETTLE_S,
) -> AsyncIterator[Step]:
    """What `waiter` receives within `bound_s`, in order: `KEEPALIVE` (bytes, to write as they are)
    after each `keepalive_s` without news, each new chunk (`Restarted` for one that starts the answer
    over, `Gapped` for one after a lost chunk; repeats are dropped), and last either the
    `InferenceResult` or why it stopped (`Stopped`; `IDLE` only with `idle_s`: that long without a
    chunk once one came). `from_start`: the waiter was there before the answer began
    (`ChunkTracker`). An OK result the chunks seen do not cover waits up to `settle_s` for the
    chunks read after it."""
    loop = asyncio.get_running_loop()
    ends_at = loop.time() + bound_s
    tracker = ChunkTracker(from_start=from_start)
    covered = _Covered()
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
            settle_until = loop.time() + min(settle_s, max(ends_at - loop.time(), 0.0))
            while not covered.by_chunks(item) and (late_s := settle_until - loop.time()) > 0:
                chunk = await waiter.late_chunk(late_s)
                if chunk is None:
                    break
                step = _step(tracker, covered, chunk)
                if step is not None:
                    yield step
            yield item
            return
        else:
            step = _step(tracker, covered, item)
            if step is not None:
                last_chunk_at = loop.time()
                yield step
    yield Stopped.BOUND


def _step(tracker: ChunkTracker, covered: _Covered, chunk: InferenceChunk) -> Step | None:
    """What `chunk` is to the caller: None for a repeat."""
    order = tracker.accept(chunk)
    if order is ChunkOrder.REPEAT:
        return None
    if order is ChunkOrder.RESTART:
        covered.restart()
        covered.add(chunk)
        return Restarted(chunk)
    covered.add(chunk)
    return Gapped(chunk) if order is ChunkOrder.GAP else chunk


class _Covered:
    """Whether the chunks of the current answer say all of an OK result: every choice of the result
    ended by a chunk (its `finish_reason`) or its text all sent. No chunk at all: the answer did not
    stream (or the caller follows no chunks), and the result says it all."""

    def __init__(self) -> None:
        self._text: dict[int, list[str]] = {}
        self._ended: set[int] = set()

    def restart(self) -> None:
        self._text.clear()
        self._ended.clear()

    def add(self, chunk: InferenceChunk) -> None:
        self._text.setdefault(chunk.choice_index, []).append(chunk.delta)
        if chunk.finish_reason is not None:
            self._ended.add(chunk.choice_index)

    def by_chunks(self, result: InferenceResult) -> bool:
        if not self._text or result.status is not Status.OK:
            return True
        return all(
            choice.index in self._ended or "".join(self._text.get(choice.index, ())) == (choice.content or "")
            for choice in result.all_choices()
        )


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
