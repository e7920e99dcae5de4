"""``POST /v1/embeddings``: OpenAI's embeddings through the queue, waited for like a completion.

The steps are a completion's (`SubmitEndpoint`'s: the caller, its rate and body; the body parsed
and checked, `embedding_body`; the record, `embedding_record`, within the tenant's entitlements, its
deadline cut to the SDK's timeout; a waiter registered in the delivery hub before the produce; the
produce). The outcome is OpenAI's ``CreateEmbeddingResponse`` (a ``list`` of ``embedding`` objects,
each vector as floats or, with ``encoding_format: base64``, as the base64 of its little-endian
32-bit floats, as OpenAI sends it), or the outcome's error as for a completion (`answers`).
The wait is bounded as a completion's (504 ``wait_exceeded``, the request still queued: its outcome,
vectors included, is ``GET /v1/requests/{id}`` on the results service).
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.delivery.hub import HubFullError, WaiterHub
from inferq.delivery.metrics import DeliveryMetrics
from inferq.delivery.sse import CLIENT_GONE_STATUS, ClientGoneError, until_disconnected
from inferq.ingest.chat import answers
from inferq.ingest.chat.body import sdk_patience_ms
from inferq.ingest.chat.embedding_body import parse_embedding_body
from inferq.ingest.chat.embedding_record import embedding_record
from inferq.ingest.chat.errors import NotFollowingError, WaitersFullError
from inferq.ingest.deadlines import wait_s, within_patience
from inferq.ingest.errors import IngestError
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.submit import SubmitEndpoint
from inferq.ingest.tenants import TenantGate
from inferq.messaging.records import InferenceResult
from inferq.tenancy.auth import Principal

_RESULTS_HINT = "GET /v1/requests/{id} on the results service gives its outcome"


@dataclass(frozen=True)
class EmbeddingLimits:
    """The embedding models served (``inferq`` names the first), the default scenario and how long a
    caller is held (as a completion's caller: `ChatLimits`)."""

    models: tuple[str, ...]
    default_scenario: str = "chat_embedding"
    max_wait_s: float = 300.0
    grace_s: float = 5.0


class EmbeddingsEndpoint:
    """The handler (`handle`); `hub` and `following` as `ChatCompletionsEndpoint`'s."""

    def __init__(
        self,
        submit: SubmitEndpoint,
        hub: WaiterHub,
        gate: TenantGate,
        *,
        guard: JsonGuard,
        limits: EmbeddingLimits,
        clock_ms: Callable[[], int],
        following: Callable[[], bool] = lambda: True,
        delivery: DeliveryMetrics | None = None,
    ) -> None:
        self._submit = submit
        self._hub = hub
        self._gate = gate
        self._guard = guard
        self._limits = limits
        self._clock_ms = clock_ms
        self._following = following
        self._delivery = delivery

    async def handle(self, request: Request) -> Response:
        if not self._following():
            return answers.refusal_error(NotFollowingError()).response()
        request_id = f"embd-{uuid.uuid4().hex}"
        principal: Principal | None = None
        held = ExitStack()
        try:
            principal = self._submit.caller(request)
            raw = await self._submit.body(request, principal)
            body, texts = parse_embedding_body(raw, self._guard)
            entitled = principal.tenant.entitlements
            record = embedding_record(
                texts,
                body.dimensions,
                body.user,
                body.model,
                request.headers,
                self._submit.rules,
                models=self._limits.models,
                default_scenario=self._limits.default_scenario,
                request_id=request_id,
                tenant=self._gate.tenant_of(principal, None),
                max_tier=entitled.max_tier,
                max_deadline_ms=entitled.max_deadline_ms,
            )
            record = self._submit.entitled(record, principal, deadline_asked=True)
            expire_at_ms = within_patience(
                record.created_at_ms, record.expire_at_ms, sdk_patience_ms(request.headers)
            )
            queued = replace(record, expire_at_ms=expire_at_ms)
            # Waiting before the record exists: its outcome cannot slip by.
            try:
                waiter = held.enter_context(self._hub.waiting(queued.tenant, queued.request_id, chunks=False))
            except HubFullError as exc:
                raise WaitersFullError() from exc
            await self._submit.publish(queued, idempotency_key=None)
        except IngestError as exc:
            held.close()
            self._submit.refused(exc, principal)
            return answers.refusal_error(exc).response()
        except BaseException:
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
        try:
            with held:
                result = await until_disconnected(request, waiter.result(bound_s))
        except ClientGoneError:
            self._ended("disconnected")
            return Response(status_code=CLIENT_GONE_STATUS)
        self._ended("bound" if result is None else "outcome")
        if result is None:
            hint = _RESULTS_HINT.replace("{id}", request_id)
            return answers.wait_exceeded(request_id, bound_s, hint).response(headers)
        error = answers.chat_error_of(result)
        if error is None and result.embeddings is None:
            error = answers.ChatError(
                502,
                f"the backend answered request {request_id} without vectors",
                "server_error",
                "backend_failed",
            )
        if error is not None:
            return error.response(headers)
        return JSONResponse(embedding_response(result, base64_vectors=body.base64), headers=headers)

    def _ended(self, how: str) -> None:
        if self._delivery is not None:
            self._delivery.ended("embeddings", how)


def embedding_response(result: InferenceResult, *, base64_vectors: bool) -> dict[str, Any]:
    """OpenAI's ``CreateEmbeddingResponse`` of an OK result with its vectors."""
    vectors = result.embeddings or ()
    usage = result.usage
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": index,
                "embedding": encoded(vector) if base64_vectors else list(vector),
            }
            for index, vector in enumerate(vectors)
        ],
        "model": result.model,
        "usage": {
            "prompt_tokens": 0 if usage is None else usage.prompt_tokens,
            "total_tokens": 0 if usage is None else usage.total_tokens,
        },
    }


def encoded(vector: Sequence[float]) -> str:
    """A vector as OpenAI's base64: its 32-bit floats, little-endian."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
