"""`InferqClient`: one surface over either transport, async; `SyncInferqClient` wraps it for code
without an event loop.

    async with InferqClient(HttpTransport("http://localhost:8700", api_key=KEY)) as client:
        outcome = await client.infer("realtime_chat", "hi")          # submit + wait, OK or raises
        handle = await client.submit("morning_brief", "brief for u1")
        outcome = await client.result(handle.request_id, timeout=60)
        async with client.stream("realtime_chat", "tell me a story") as stream:
            async for chunk in stream:
                print(chunk.delta, end="")
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

from inferq.client.errors import InferqError, InvalidRequestError, WaitTimeoutError
from inferq.client.models import Chunk, Handle, MessagesLike, Outcome, Submission, as_messages
from inferq.client.transport import Transport
from inferq.messaging.tiers import Tier

T = TypeVar("T")

DEFAULT_RESULT_TIMEOUT_S = 30.0
# infer() and stream() wait for the request's deadline and this much longer: the dispatcher answers
# EXPIRED at the deadline, so past it the outcome is on its way.
DEADLINE_GRACE_S = 10.0
# Without a known deadline (a stream over HTTP), the wait of stream().
DEFAULT_STREAM_TIMEOUT_S = 120.0


def new_request_id() -> str:
    return str(uuid.uuid4())


class Stream:
    """A streamed answer: iterate for `Chunk`s in order; afterwards `outcome` is the result and
    `text` the answer (restarted answers already dropped). Iteration raises the `OutcomeError` of a
    request that did not end OK, `WaitTimeoutError` when the wait ended first. Use it as an
    ``async with`` block (or call `aclose`) to free the stream's resources when leaving early."""

    def __init__(
        self, items: AsyncIterator[Chunk | Outcome], request_id: str | None, timeout_s: float
    ) -> None:
        self._items = items
        self._timeout_s = timeout_s
        self.request_id = request_id
        self.outcome: Outcome | None = None
        self._parts: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Chunk:
        if self.outcome is not None:
            raise StopAsyncIteration
        try:
            item = await anext(self._items)
        except StopAsyncIteration:
            raise WaitTimeoutError(self.request_id or "(stream)", self._timeout_s) from None
        if isinstance(item, Outcome):
            self.outcome = item
            self.request_id = item.request_id
            # The outcome is the last item: free the stream's waiter now, not when it is collected.
            await self.aclose()
            item.raise_for_status()
            raise StopAsyncIteration
        self.request_id = item.request_id
        if item.restart:
            self._parts.clear()
        self._parts.append(item.delta)
        return item

    async def aclose(self) -> None:
        aclose = getattr(self._items, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> Stream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class InferqClient:
    """Submit requests, wait for outcomes, stream answers; over `HttpTransport` or `KafkaTransport`."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def __aenter__(self) -> InferqClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def submit(
        self,
        scenario: str,
        messages: MessagesLike,
        *,
        request_id: str | None = None,
        session_id: str | None = None,
        priority: Tier | str | None = None,
        deadline_ms: int | None = None,
        model: str | None = None,
        params: Mapping[str, Any] | None = None,
        estimated_tokens: int | None = None,
    ) -> Handle:
        """Queue a request; its `Handle` once inferq accepted it. A `request_id` of your own makes a
        resend idempotent (over HTTP, per tenant); one is made up otherwise."""
        submission = _submission(
            scenario=scenario,
            messages=messages,
            request_id=request_id,
            session_id=session_id,
            priority=priority,
            deadline_ms=deadline_ms,
            model=model,
            params=params,
            estimated_tokens=estimated_tokens,
        )
        return await self.transport.submit(submission)

    # The timeout is the wait's bound handed to the transport (a long poll's server-side wait), not a
    # cancellation scope the caller could put around the call instead.
    async def result(self, request_id: str, timeout: float = DEFAULT_RESULT_TIMEOUT_S) -> Outcome:  # noqa: ASYNC109
        """The request's outcome when OK; raises its `OutcomeError` otherwise, `WaitTimeoutError`
        when none arrived within `timeout` seconds."""
        outcome = await self.transport.wait(request_id, timeout)
        if outcome is None:
            raise WaitTimeoutError(request_id, timeout)
        return outcome.raise_for_status()

    async def infer(
        self,
        scenario: str,
        messages: MessagesLike,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - as result()'s
        **options: Any,
    ) -> Outcome:
        """Submit and wait: the OK outcome, or the error. `timeout` defaults to the request's deadline
        and a grace period."""
        handle = await self.submit(scenario, messages, **options)
        if timeout is None:
            timeout = max(handle.expire_at_ms / 1000 - time.time(), 0.0) + DEADLINE_GRACE_S
        return await self.result(handle.request_id, timeout)

    def stream(
        self, scenario: str, messages: MessagesLike, *, timeout: float | None = None, **options: Any
    ) -> Stream:
        """Submit for streaming: a `Stream` of the answer's chunks (see `Stream`)."""
        submission = _submission(scenario=scenario, messages=messages, stream=True, **options)
        wait_s = timeout if timeout is not None else _stream_wait_s(submission)
        return Stream(self.transport.stream(submission, wait_s), submission.request_id, wait_s)


def _stream_wait_s(submission: Submission) -> float:
    if submission.deadline_ms is not None:
        return submission.deadline_ms / 1000 + DEADLINE_GRACE_S
    return DEFAULT_STREAM_TIMEOUT_S


def _submission(**fields: Any) -> Submission:
    priority = fields.get("priority")
    if isinstance(priority, str):
        try:
            fields["priority"] = Tier(priority.upper())
        except ValueError:
            problem = {"field": "priority", "problem": "must be HIGH, MEDIUM or LOW"}
            raise InvalidRequestError(
                "priority must be HIGH, MEDIUM or LOW", status_code=422, problems=[problem]
            ) from None
    fields["messages"] = as_messages(fields["messages"])
    fields["request_id"] = fields.get("request_id") or new_request_id()
    return Submission(**fields)


async def _next(stream: Stream) -> Chunk:
    return await anext(stream)


class SyncInferqClient:
    """`InferqClient` for synchronous code: its own event loop in a background thread, so a Kafka
    transport keeps following its reply topic between calls. Close it (or use ``with``)."""

    def __init__(self, transport: Transport) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="inferq-client", daemon=True)
        self._thread.start()
        self._client = InferqClient(transport)
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise InferqError("client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def submit(self, scenario: str, messages: MessagesLike, **options: Any) -> Handle:
        return self._run(self._client.submit(scenario, messages, **options))

    def result(self, request_id: str, timeout: float = DEFAULT_RESULT_TIMEOUT_S) -> Outcome:
        return self._run(self._client.result(request_id, timeout))

    def infer(self, scenario: str, messages: MessagesLike, **options: Any) -> Outcome:
        return self._run(self._client.infer(scenario, messages, **options))

    def stream(self, scenario: str, messages: MessagesLike, **options: Any) -> Iterator[Chunk]:
        """The chunks, as a generator; leaving the loop early closes the stream."""
        stream = self._client.stream(scenario, messages, **options)
        try:
            while True:
                try:
                    yield self._run(_next(stream))
                except StopAsyncIteration:
                    return
        finally:
            if not self._closed:
                self._run(stream.aclose())

    def close(self) -> None:
        if self._closed:
            return
        self._run(self._client.aclose())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        self._loop.close()

    def __enter__(self) -> SyncInferqClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
