"""``POST /v1/chat/completions`` and ``GET /v1/models``.

A completion is queued and waited for as every call of the OpenAI endpoints is (`held_calls`: the
caller, its rate and body, the record within the tenant's entitlements and the SDK's timeout, a
waiter registered before the produce, the bounded wait); the OpenAI body is parsed and checked by
ingest's rules (`body`, `record`). Then:

- without ``stream``: the ``chat.completion`` once the result arrives (or the outcome's error);
- with ``stream``: Server-Sent Events at once (the role chunk), each chunk record as it arrives
  (its choice's text, refusal, tool-call deltas, logprobs: ``chunks.py``), then the end (each
  choice's ``finish_reason``, the ``system_fingerprint``, the usage chunk when asked for,
  ``data: [DONE]``). Text and tool calls the chunks did not carry are sent from the result (all of
  it when the dispatcher does not stream). An answer that started over after text was sent, a stream
  that stops for `stream_idle_s`, or no outcome in time ends with an error event
  (``data: {"error": ...}``), never a hang.

A stream's wait has `held_calls`' bound too; the completion's ``id`` and the
``x-inferq-request-id`` header name the request for the results service.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.delivery.hub import Waiter
from inferq.delivery.sse import (
    EventStreamResponse,
    Gapped,
    Restarted,
    Stopped,
    follow,
    sse_event,
)
from inferq.ingest.chat import answers
from inferq.ingest.chat.body import AUTO_MODEL, ChatCompletionBody, parse_chat_body
from inferq.ingest.chat.chunks import StreamedAnswer
from inferq.ingest.chat.held_calls import HeldCalls, results_hint
from inferq.ingest.chat.record import chat_record
from inferq.ingest.errors import IngestError
from inferq.ingest.json_guard import JsonGuard
from inferq.messaging.records import InferenceChunk, InferenceRequest, InferenceResult
from inferq.tenancy.auth import Principal

_DONE = sse_event("[DONE]")


@dataclass(frozen=True)
class ChatLimits:
    """The models served and how long a caller is held."""

    models: frozenset[str]
    default_scenario: str = "realtime_chat"
    # Listed by `GET /v1/models` after the chat models (``POST /v1/embeddings`` serves them).
    embedding_models: tuple[str, ...] = ()
    # A stream whose chunks stop for this long (a dispatcher died mid-answer) ends with an error.
    stream_idle_s: float = 30.0
    # A comment on a quiet stream this often (proxies, and noticing a client that left).
    keepalive_s: float = 15.0


class ChatCompletionsEndpoint:
    """The handlers (`handle`, `models`), on `calls` (the steps every call of the OpenAI endpoints
    takes)."""

    def __init__(self, calls: HeldCalls, *, guard: JsonGuard, limits: ChatLimits) -> None:
        self._calls = calls
        self._guard = guard
        self._limits = limits

    async def models(self, request: Request) -> Response:
        """The models a caller may name: `AUTO_MODEL` (the tier's model), then the configured chat
        and embedding models the tenant is entitled to. 401 without a valid key."""
        try:
            principal = self._calls.gate.caller(request)
        except IngestError as exc:
            return answers.refusal_error(exc).response()
        allowed = principal.tenant.entitlements.models
        names = [AUTO_MODEL, *sorted(m for m in self._limits.models if m in allowed)]
        names += [m for m in self._limits.embedding_models if m in allowed and m not in names]
        return JSONResponse(answers.models_list(names))

    async def handle(self, request: Request) -> Response:
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        held = await self._calls.queue(
            request,
            lambda raw, principal: parse_chat_body(
                raw, self._guard, principal.tenant.entitlements.passthrough
            ),
            lambda body, principal: self._record(body, request, principal, request_id),
            chunks=lambda body: bool(body.stream),
        )
        if isinstance(held, Response):
            return held
        if held.body.stream:
            events = self._stream(held.body, held.waiter, held.queued, held.bound_s)
            return EventStreamResponse(events, headers=held.headers, on_close=held.scope.close)
        result = await self._calls.outcome(request, held, "completion")
        if isinstance(result, Response):
            return result
        error = answers.chat_error_of(result)
        if error is not None:
            return error.response(held.headers)
        return JSONResponse(answers.completion(result), headers=held.headers)

    def _record(
        self, body: ChatCompletionBody, request: Request, principal: Principal, request_id: str
    ) -> InferenceRequest:
        """The record of `body` and the headers, within the tenant's bounds."""
        entitled = principal.tenant.entitlements
        return chat_record(
            body,
            request.headers,
            self._calls.submit.rules,
            models=self._limits.models,
            default_scenario=self._limits.default_scenario,
            request_id=request_id,
            tenant=self._calls.gate.tenant_of(principal, None),
            max_tier=entitled.max_tier,
            max_deadline_ms=entitled.max_deadline_ms,
        )

    async def _stream(
        self, body: ChatCompletionBody, waiter: Waiter, queued: InferenceRequest, bound_s: float
    ) -> AsyncIterator[bytes]:
        how = "disconnected"
        try:
            async for event in self._events(body, waiter, queued, bound_s):
                if event.startswith(b'data: {"error"'):
                    how = "error"
                elif event == _DONE:
                    how = "outcome"
                yield event
        finally:
            self._calls.ended("stream", how)

    async def _events(
        self, body: ChatCompletionBody, waiter: Waiter, queued: InferenceRequest, bound_s: float
    ) -> AsyncIterator[bytes]:
        rid = queued.request_id
        created_s = queued.created_at_ms // 1000
        yield sse_event(answers.chunk(rid, created_s, body.model, role=True, content=""))
        sent = StreamedAnswer(rid, created_s)
        restarted = False
        steps = follow(
            waiter,
            bound_s=bound_s,
            keepalive_s=self._limits.keepalive_s,
            idle_s=self._limits.stream_idle_s,
            # The waiter was registered before the request was produced: chunk 0 is the first.
            from_start=True,
        )
        async for step in steps:
            if isinstance(step, bytes):
                yield step
            elif isinstance(step, InferenceResult):
                async for event in self._ending(body, step, sent, created_s):
                    yield event
            elif isinstance(step, (Restarted, Gapped)) or (restarted and isinstance(step, InferenceChunk)):
                # Text already sent cannot be taken back, and a lost chunk's text is only in the
                # result: the rest comes from the result, if it continues what was sent. Only chunks
                # are passed over: a stream that then stops still ends with its error event.
                restarted = True
            elif isinstance(step, InferenceChunk):
                chunk = sent.chunk(step)
                if chunk is not None:
                    yield sse_event(chunk)
            elif step is Stopped.IDLE:
                message = f"the answer to {rid} stopped arriving mid-stream; {results_hint(rid)}"
                yield _error_event(answers.ChatError(502, message, "server_error", "stream_interrupted"))
            else:
                yield _error_event(answers.wait_exceeded(rid, bound_s, results_hint(rid)))

    async def _ending(
        self, body: ChatCompletionBody, result: InferenceResult, sent: StreamedAnswer, created_s: int
    ) -> AsyncIterator[bytes]:
        error = answers.chat_error_of(result)
        if error is not None:
            yield _error_event(error)
            return
        rid = result.request_id
        if not sent.continued_by(result):
            message = f"the answer to {rid} started over after part of it was sent; {results_hint(rid)}"
            yield _error_event(answers.ChatError(502, message, "server_error", "stream_restarted"))
            return
        for chunk in sent.ending(result):
            yield sse_event(chunk)
        if body.stream_options is not None and body.stream_options.include_usage:
            yield sse_event(answers.usage_chunk(result, created_s))
        yield _DONE


def _error_event(error: answers.ChatError) -> bytes:
    # What OpenAI sends mid-stream: the SDK raises APIError on an event whose data has "error".
    return sse_event(error.body())
