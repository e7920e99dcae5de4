"""OpenAI's objects, written from inferq's: ``chat.completion``, ``chat.completion.chunk``, errors.

Every refusal and every outcome that is not OK is an OpenAI error object
(``{"error": {"message", "type", "param", "code"}}``) with a fitting status:

| what | status | type / code |
| --- | --- | --- |
| no valid key | 401 | invalid_request_error / invalid_api_key |
| not entitled (a field, a model) | 403 | permission_error / not_entitled |
| a body OpenAI would refuse | 400 | invalid_request_error / (the problem) |
| unknown model | 404 | invalid_request_error / model_not_found |
| body too slow, too large | 408, 413 | invalid_request_error |
| tenant's rate, tier full | 429 + Retry-After | rate_limit_error / (the quota) |
| Kafka did not acknowledge, too many waiting | 503 + Retry-After | server_error |
| outcome EXPIRED (deadline passed) | 504 | timeout / deadline_exceeded |
| outcome EVICTED (LOW shed under load) | 503 + Retry-After | server_error / evicted |
| outcome FAILED (the backend failed, retries spent) | 502 | server_error / backend_failed |
| outcome REJECTED (the dispatcher refused the record) | 403 | permission_error / rejected |
| no outcome within the wait | 504 | timeout / wait_exceeded |

Answers about a queued request say ``x-should-retry: false`` when sending it again would queue a
second request for nothing (it expired, the backend failed after its retries, it is still queued):
the OpenAI SDK retries 408, 429 and 5xx by default and obeys that header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from inferq.ingest.chat.errors import ChatRefusal
from inferq.ingest.errors import IngestError
from inferq.messaging import limits
from inferq.messaging.records import Choice, InferenceResult, Status

_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
}
NO_RETRY = {"x-should-retry": "false"}


@dataclass(frozen=True)
class ChatError:
    """An OpenAI error: its status, body fields and headers."""

    status: int
    message: str
    type: str
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] | None = None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self, extra_headers: dict[str, str] | None = None) -> JSONResponse:
        headers = (self.headers or {}) | (extra_headers or {})
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def refusal_error(exc: IngestError) -> ChatError:
    """An ingest refusal (`IngestError`, `ChatRefusal` included) as an OpenAI error."""
    status = exc.status_code
    message = str(exc)
    param: str | None = None
    code: str | None = exc.reason
    if isinstance(exc, ChatRefusal):
        param, code = exc.param, exc.code
    problems = getattr(exc, "problems", None)
    if isinstance(problems, list) and problems:
        param = str(problems[0].get("field"))
    if status == 401:
        code = "invalid_api_key"
    if status == 422:
        # OpenAI answers a value out of its contract with 400.
        status = 400
    headers = dict(exc.headers() or {})
    return ChatError(status, message, _TYPES.get(status, "server_error"), code, param, headers or None)


def chat_error_of(result: InferenceResult) -> ChatError | None:
    """The chat error of a result that is not OK; None for OK."""
    rid = result.request_id
    if result.status is Status.OK:
        return None
    if result.status is Status.EXPIRED:
        return ChatError(
            504,
            f"request {rid} expired before the backend answered",
            "timeout",
            "deadline_exceeded",
            None,
            NO_RETRY,
        )
    if result.status is Status.EVICTED:
        return ChatError(
            503,
            f"request {rid} was shed under load; retry later",
            "server_error",
            "evicted",
            None,
            {"Retry-After": "5"},
        )
    if result.status is Status.REJECTED:
        reason = result.error or "refused"
        return ChatError(
            403, f"request {rid} was refused: {reason}", "permission_error", "rejected", None, NO_RETRY
        )
    # FAILED: the dispatcher's retries are spent; the backend's words stay in the result.
    return ChatError(
        502, f"the backend failed to answer request {rid}", "server_error", "backend_failed", None, NO_RETRY
    )


def wait_exceeded(request_id: str, waited_s: float, results_hint: str) -> ChatError:
    """No outcome within the connection's bound: the request is still queued."""
    return ChatError(
        504,
        f"no outcome for request {request_id} within {waited_s:.0f} s; it is still queued: {results_hint}",
        "timeout",
        "wait_exceeded",
        None,
        NO_RETRY,
    )


def _usage(result: InferenceResult) -> dict[str, Any]:
    usage = result.usage
    if usage is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return usage.as_openai()


def finish_reason_of(result: InferenceResult | Choice) -> str:
    """Why the backend stopped, as the result (or one of its choices) says; "stop" when it does not
    say (a result written before results carried it) or says what the API has no name for."""
    reason = result.finish_reason
    return reason if reason in limits.FINISH_REASONS else "stop"


def _inferq(result: InferenceResult) -> dict[str, Any]:
    """inferq's own facts about the answer (clients that do not know the field ignore it)."""
    return {
        "request_id": result.request_id,
        "tier": result.tier.value,
        "attempts": result.attempts,
        "queue_wait_ms": result.queue_wait_ms,
        "end_to_end_ms": result.end_to_end_ms,
    }


def _message(choice: Choice) -> dict[str, Any]:
    """The assistant's message: its text, its refusal, and its tool calls when it made some (content
    null when it wrote nothing besides them or a refusal, as OpenAI answers)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": choice.content or "",
        "refusal": choice.refusal,
    }
    calls = choice.openai_tool_calls()
    if calls:
        message["tool_calls"] = calls
    if not choice.content and (calls or choice.refusal is not None):
        message["content"] = None
    return message


def _choice(choice: Choice) -> dict[str, Any]:
    return {
        "index": choice.index,
        "message": _message(choice),
        "logprobs": choice.openai_logprobs(),
        "finish_reason": finish_reason_of(choice),
    }


def completion(result: InferenceResult) -> dict[str, Any]:
    """The ``chat.completion`` of an OK result, every choice of it."""
    return {
        "id": result.request_id,
        "object": "chat.completion",
        "created": result.completed_at_ms // 1000,
        "model": result.model,
        "choices": [_choice(choice) for choice in result.all_choices()],
        "usage": _usage(result),
        "system_fingerprint": result.system_fingerprint,
        "inferq": _inferq(result),
    }


def chunk(
    request_id: str,
    created_s: int,
    model: str,
    *,
    index: int = 0,
    content: str | None = None,
    role: bool = False,
    tool_calls: list[Any] | None = None,
    refusal: str | None = None,
    logprobs: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    system_fingerprint: str | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with one choice (`index`): the role (a choice's first), a piece
    of text, refusal or tool calls (OpenAI's `delta.tool_calls` entries), or the end (which alone
    knows the backend's `system_fingerprint`: it comes with the result)."""
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    if refusal is not None:
        delta["refusal"] = refusal
    if tool_calls:
        delta["tool_calls"] = tool_calls
    return {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created_s,
        "model": model,
        "system_fingerprint": system_fingerprint,
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


def usage_chunk(result: InferenceResult, created_s: int) -> dict[str, Any]:
    """The last chunk when ``stream_options.include_usage``: no choices, the usage."""
    return {
        "id": result.request_id,
        "object": "chat.completion.chunk",
        "created": created_s,
        "model": result.model,
        "system_fingerprint": result.system_fingerprint,
        "choices": [],
        "usage": _usage(result),
    }


def models_list(names: list[str], owned_by: str = "inferq") -> dict[str, Any]:
    """``GET /v1/models``'s list object."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": owned_by} for name in names],
    }
