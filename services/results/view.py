"""What a caller of ``GET /v1/requests/{id}`` sees of a result."""

from __future__ import annotations

from typing import Any

from inferq.messaging.records import Choice, InferenceResult


def public_view(result: InferenceResult) -> dict[str, Any]:
    """The outcome and its timings in milliseconds; output, error, usage (with the backend's token
    details), finish_reason, system_fingerprint and the assistant's tool_calls (OpenAI's list) only when
    present, all of them the first choice's; `choices`, every choice, when the answer has more than
    those say (n > 1, a refusal, logprobs); an embedding request's vectors (`embeddings`, one list
    of floats per input, in order) when present."""
    dispatched = result.dispatched_at_ms
    view: dict[str, Any] = {
        "request_id": result.request_id,
        "status": result.status.value,
        "tier": result.tier.value,
        "model": result.model,
        "attempts": result.attempts,
        "timings": {
            "enqueued_at_ms": result.enqueued_at_ms,
            "dispatched_at_ms": dispatched,
            "completed_at_ms": result.completed_at_ms,
            "queue_wait_ms": result.queue_wait_ms,
            "inference_ms": (result.completed_at_ms - dispatched) if dispatched is not None else None,
            "end_to_end_ms": result.end_to_end_ms,
        },
    }
    if result.output is not None:
        view["output"] = result.output
    if result.error is not None:
        view["error"] = result.error
    if result.usage is not None:
        view["usage"] = result.usage.as_openai()
    if result.finish_reason is not None:
        view["finish_reason"] = result.finish_reason
    if result.system_fingerprint is not None:
        view["system_fingerprint"] = result.system_fingerprint
    calls = result.openai_tool_calls()
    if calls is not None:
        view["tool_calls"] = calls
    if result.choices is not None:
        view["choices"] = [_choice(choice) for choice in result.choices]
    if result.embeddings is not None:
        view["embeddings"] = [list(vector) for vector in result.embeddings]
    return view


def _choice(choice: Choice) -> dict[str, Any]:
    """One choice: its index, text and finish_reason (null when none), and its tool_calls (OpenAI's
    list), refusal and logprobs (OpenAI's object) only when present."""
    view: dict[str, Any] = {
        "index": choice.index,
        "content": choice.content,
        "finish_reason": choice.finish_reason,
    }
    calls = choice.openai_tool_calls()
    if calls is not None:
        view["tool_calls"] = calls
    if choice.refusal is not None:
        view["refusal"] = choice.refusal
    logprobs = choice.openai_logprobs()
    if logprobs is not None:
        view["logprobs"] = logprobs
    return view
