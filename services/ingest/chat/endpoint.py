"""``POST /v1/chat/completions`` and ``GET /v1/models``.

A completion takes `SubmitEndpoint`'s steps (the caller, its rate and body; the OpenAI body parsed
and checked by ingest's rules; the record, its deadline cut to the SDK's timeout; the produce:
ingest's one path). Before the record is produced,
a waiter is registered in the delivery hub for (tenant, request_id), so its outcome cannot slip by;
the reply topic's follower wakes it. Then:

- without ``stream``: the ``chat.completion`` once the result arrives (or the outcome's error);
- with ``stream``: Server-Sent Events at once (the role chunk), each chunk record as it arrives
  (its choice's text, refusal, tool-call deltas, logprobs: ``chunks.py``), then the end (each
  choice's ``finish_reason``, the ``system_fingerprint``, the usage chunk when asked for,
  ``data: [DONE]``). Text and tool calls the chunks did not carry are sent from the result (all of
  it when the dispatcher does not stream). An answer that started over after text was sent, a stream
  that stops for `stream_idle_s`, or no outcome in time ends with an error event
  (``data: {"error": ...}``), never a hang.

Every wait is bounded: by the request's deadline plus `grace_s` (the dispatcher answers EXPIRED
itself by then) and by `max_wait_s`; past it 504 ``wait_exceeded``, the request still queued (read
its outcome from the results service with its id, the completion's ``id`` and the
``x-inferq-request-id`` header). A client that disconnects frees its waiter at once; its request
still runs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.delivery.hub import HubFullError, Waiter, WaiterHub
from inferq.delivery.metrics import DeliveryMetrics
from inferq.delivery.sse import (
    CLIENT_GONE_STATUS,
    ClientGoneError,
    EventStreamResponse,
    Restarted,
    Stopped,
    follow,
    sse_event,
    until_disconnected,
)
from inferq.ingest.chat import answers
from inferq.ingest.chat.body import AUTO_MODEL, ChatCompletionBody, parse_chat_body, sdk_patience_ms
from inferq.ingest.chat.chunks import StreamedAnswer
from inferq.ingest.chat.errors import NotFollowingError, WaitersFullError
from inferq.ingest.chat.record import chat_record
from inferq.ingest.deadlines import wait_s, within_patience
from inferq.ingest.errors import IngestError
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.submit import SubmitEndpoint
from inferq.ingest.tenants import TenantGate
from inferq.messaging.records import InferenceChunk, InferenceRequest, InferenceResult
from inferq.tenancy.auth import Principal

_DONE = sse_event("[DONE]")
_RESULTS_HINT = "GET /v1/requests/{id} on the results service gives its outcome"


@dataclass(frozen=True)
class ChatLimits:
    """The models served and how long a caller is held."""

    models: frozenset[str]
    default_scenario: str = "realtime_chat"
    # A connection waits at most this long for its outcome.
    max_wait_s: float = 300.0
    # After the request's deadline, how long the dispatcher's EXPIRED is still awaited.
    grace_s: float = 5.0
    # A stream whose chunks stop for this long (a dispatcher died mid-answer) ends with an error.
    stream_idle_s: float = 30.0
    # A comment on a quiet stream this often (proxies, and noticing a client that left).
    keepalive_s: float = 15.0


class ChatCompletionsEndpoint:
    """The handlers (`handle`, `models`); `hub` is fed by ingest's reply-topic follower, and
    `following` says whether it reads yet (until then completions are refused 503: an outcome
    written before it reads would be missed)."""

    def __init__(
        self,
        submit: SubmitEndpoint,
        hub: WaiterHub,
        gate: TenantGate,
        *,
        guard: JsonGuard,
        limits: ChatLimits,
        clock_ms: Callable[[], int],
        following: Callable[[], bool] = lambda: True,
        delivery: DeliveryMetrics | None = None,
    ) -> None:
        self._following = following
        self._delivery = delivery
        self._submit = submit
        self._hub = hub
        self._gate = gate
        self._guard = guard
        self._limits = limits
        self._clock_ms = clock_ms

    async def models(self, request: Request) -> Response:
        """The models a caller may name: `AUTO_MODEL` (the tier's model) and the configured ones
        the tenant is entitled to. 401 without a valid key."""
        try:
            principal = self._gate.caller(request)
        except IngestError as exc:
            return answers.refusal_error(exc).response()
        allowed = principal.tenant.entitlements.models
        names = [AUTO_MODEL, *sorted(m for m in self._limits.models if m in allowed)]
        return JSONResponse(answers.models_list(names))

    async def handle(self, request: Request) -> Response:
        if not self._following():
            return answers.refusal_error(NotFollowingError()).response()
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        principal: Principal | None = None
        held = ExitStack()
        try:
            principal = self._submit.caller(request)
            raw = await self._submit.body(request, principal)
            body = parse_chat_body(raw, self._guard, principal.tenant.entitlements.passthrough)
            queued = self._record(body, request, principal, request_id)
            # Waiting before the record exists: its outcome cannot slip by.
            waiter = self._waiting(held, queued, chunks=bool(body.stream))
            await self._submit.publish(queued, idempotency_key=None)
        except IngestError as exc:
            held.close()
            self._submit.refused(exc, principal)
            return answers.refusal_error(exc).response()
        except BaseException:
            # Cancelled (shutdown) or broken while publishing: the waiter must not outlive us.
            held.close()
            raise
        headers = {
            "x-inferq-request-id": request_id,
            "x-request-id": request_id,
            "x-inferq-tier": queued.tier.value,
        }
        bound_s = wait_s(
            queued.expire_at_ms,
            self._clock_ms(),
            grace_s=self._limits.grace_s,
            max_wait_s=self._limits.max_wait_s,
        )
        if body.stream:
            events = self._stream(body, waiter, queued, bound_s)
            return EventStreamResponse(events, headers=headers, on_close=held.close)
        try:
            with held:
                result = await until_disconnected(request, waiter.result(bound_s))
        except ClientGoneError:
            self._ended("completion", "disconnected")
            return Response(status_code=CLIENT_GONE_STATUS)
        self._ended("completion", "bound" if result is None else "outcome")
        if result is None:
            return answers.wait_exceeded(request_id, bound_s, self._hint(request_id)).response(headers)
        error = answers.chat_error_of(result)
        if error is not None:
            return error.response(headers)
        return JSONResponse(answers.completion(result), headers=headers)

    def _record(
        self, body: ChatCompletionBody, request: Request, principal: Principal, request_id: str
    ) -> InferenceRequest:
        """The record of `body` and the headers as the tenant may send it, its deadline then cut to
        the SDK's timeout (`sdk_patience_ms`)."""
        entitled = principal.tenant.entitlements
        record = chat_record(
            body,
            request.headers,
            self._submit.rules,
            models=self._limits.models,
            default_scenario=self._limits.default_scenario,
            request_id=request_id,
            tenant=self._gate.tenant_of(principal, None),
            max_tier=entitled.max_tier,
            max_deadline_ms=entitled.max_deadline_ms,
        )
        # A completion's deadline can only be asked as a relative one (deadline_ms): a deadline the
        # tenant may not have is named so (the tier's own is within the tenant's cap already).
        record = self._submit.entitled(record, principal, deadline_asked=True)
        patience_ms = sdk_patience_ms(request.headers)
        expire_at_ms = within_patience(record.created_at_ms, record.expire_at_ms, patience_ms)
        return record if expire_at_ms == record.expire_at_ms else replace(record, expire_at_ms=expire_at_ms)

    def _waiting(self, held: ExitStack, queued: InferenceRequest, *, chunks: bool) -> Waiter:
        """A waiter for `queued`'s outcome, held until `held` closes; `WaitersFullError` (503)."""
        try:
            return held.enter_context(self._hub.waiting(queued.tenant, queued.request_id, chunks=chunks))
        except HubFullError as exc:
            raise WaitersFullError() from exc

    def _ended(self, endpoint: str, how: str) -> None:
        if self._delivery is not None:
            self._delivery.ended(endpoint, how)

    @staticmethod
    def _hint(request_id: str) -> str:
        return _RESULTS_HINT.replace("{id}", request_id)

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
            self._ended("stream", how)

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
        )
        async for step in steps:
            if isinstance(step, bytes):
                yield step
            elif isinstance(step, InferenceResult):
                async for event in self._ending(body, step, sent, created_s):
                    yield event
            elif isinstance(step, Restarted) or restarted:
                # Text already sent cannot be taken back: the rest comes from the result, if it
                # continues what was sent.
                restarted = True
            elif isinstance(step, InferenceChunk):
                chunk = sent.chunk(step)
                if chunk is not None:
                    yield sse_event(chunk)
            elif step is Stopped.IDLE:
                message = f"the answer to {rid} stopped arriving mid-stream; {self._hint(rid)}"
                yield _error_event(answers.ChatError(502, message, "server_error", "stream_interrupted"))
            else:
                yield _error_event(answers.wait_exceeded(rid, bound_s, self._hint(rid)))

    async def _ending(
        self, body: ChatCompletionBody, result: InferenceResult, sent: StreamedAnswer, created_s: int
    ) -> AsyncIterator[bytes]:
        error = answers.chat_error_of(result)
        if error is not None:
            yield _error_event(error)
            return
        rid = result.request_id
        if not sent.continued_by(result):
            message = f"the answer to {rid} started over after part of it was sent; {self._hint(rid)}"
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
