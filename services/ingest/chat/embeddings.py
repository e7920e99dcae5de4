"""``POST /v1/embeddings``: OpenAI's embeddings through the queue, waited for like a completion.

The steps are a completion's (`held_calls`: the caller, its rate and body; the record within the
tenant's entitlements and the SDK's timeout; a waiter registered before the produce; the bounded
wait), with its own body (`embedding_body`) and record (`embedding_record`). The outcome is
OpenAI's ``CreateEmbeddingResponse`` (a ``list`` of ``embedding`` objects, each vector as floats
or, with ``encoding_format: base64``, as the base64 of its little-endian 32-bit floats, as OpenAI
sends it), or the outcome's error as for a completion (`answers`).
The wait is bounded as a completion's (504 ``wait_exceeded``, the request still queued: its outcome,
vectors included, is ``GET /v1/requests/{id}`` on the results service).
"""

from __future__ import annotations

import base64
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.ingest.chat import answers
from inferq.ingest.chat.embedding_body import EmbeddingBody, parse_embedding_body
from inferq.ingest.chat.embedding_record import embedding_record
from inferq.ingest.chat.held_calls import HeldCalls
from inferq.ingest.json_guard import JsonGuard
from inferq.messaging.records import InferenceRequest, InferenceResult
from inferq.tenancy.auth import Principal

_RESULTS_HINT = "GET /v1/requests/{id} on the results service gives its outcome"


@dataclass(frozen=True)
class EmbeddingLimits:
    """The embedding models served (``inferq`` names the first), the default scenario and how long a
    caller is held (as a completion's caller: `ChatLimits`)."""

    models: tuple[str, ...]
    default_scenario: str = "chat_embedding"


class EmbeddingsEndpoint:
    """The handler (`handle`), on `calls` (the steps every call of the OpenAI endpoints takes)."""

    def __init__(self, calls: HeldCalls, *, guard: JsonGuard, limits: EmbeddingLimits) -> None:
        self._calls = calls
        self._guard = guard
        self._limits = limits

    async def handle(self, request: Request) -> Response:
        request_id = f"embd-{uuid.uuid4().hex}"
        held = await self._calls.queue(
            request,
            lambda raw, _: parse_embedding_body(raw, self._guard),
            lambda parsed, principal: self._record(parsed, request, principal, request_id),
        )
        if isinstance(held, Response):
            return held
        result = await self._calls.outcome(request, held, "embeddings")
        if isinstance(result, Response):
            return result
        error = answers.chat_error_of(result)
        if error is None and result.embeddings is None:
            error = answers.ChatError(
                502,
                f"the backend answered request {request_id} without vectors",
                "server_error",
                "backend_failed",
            )
        if error is not None:
            return error.response(held.headers)
        body, _ = held.body
        return JSONResponse(embedding_response(result, base64_vectors=body.base64), headers=held.headers)

    def _record(
        self,
        parsed: tuple[EmbeddingBody, tuple[str, ...]],
        request: Request,
        principal: Principal,
        request_id: str,
    ) -> InferenceRequest:
        body, texts = parsed
        entitled = principal.tenant.entitlements
        return embedding_record(
            texts,
            body.dimensions,
            body.user,
            body.model,
            request.headers,
            self._calls.submit.rules,
            models=self._limits.models,
            default_scenario=self._limits.default_scenario,
            request_id=request_id,
            tenant=self._calls.gate.tenant_of(principal, None),
            max_tier=entitled.max_tier,
            max_deadline_ms=entitled.max_deadline_ms,
        )


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
