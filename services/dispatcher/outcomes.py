"""Builds `InferenceResult` records; every terminal outcome goes through here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.dispatcher.backend import Completion

OK = "OK"
EXPIRED = "EXPIRED"
EVICTED = "EVICTED"
FAILED = "FAILED"


@dataclass(frozen=True)
class OutcomeBuilder:
    dispatcher_id: str

    def _base(self, request: dict[str, Any], status: str, model: str, now_ms: int) -> dict[str, Any]:
        return {
            "request_id": request["request_id"],
            "tier": request["tier"],
            "status": status,
            "output": None,
            "error": None,
            "model": model,
            "usage": None,
            "enqueued_at_ms": request["created_at_ms"],
            "dispatched_at_ms": None,
            "completed_at_ms": now_ms,
            "attempts": request["attempt"],
            "dispatcher_id": self.dispatcher_id,
        }

    def ok(
        self, request: dict[str, Any], completion: Completion, *, dispatched_at_ms: int, now_ms: int
    ) -> dict[str, Any]:
        record = self._base(request, OK, completion.model, now_ms)
        record["output"] = completion.output
        record["dispatched_at_ms"] = dispatched_at_ms
        record["usage"] = {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "total_tokens": completion.total_tokens,
        }
        return record

    def expired(self, request: dict[str, Any], model: str, *, now_ms: int) -> dict[str, Any]:
        record = self._base(request, EXPIRED, model, now_ms)
        late = now_ms - int(request["expire_at_ms"])
        record["error"] = f"deadline passed {late} ms before dispatch; not sent to the LLM"
        return record

    def evicted(self, request: dict[str, Any], model: str, *, now_ms: int) -> dict[str, Any]:
        record = self._base(request, EVICTED, model, now_ms)
        record["error"] = "peak hours, batch delayed: evicted to make room for higher tiers; resubmit later"
        return record

    def failed(
        self, request: dict[str, Any], model: str, error: str, *, dispatched_at_ms: int | None, now_ms: int
    ) -> dict[str, Any]:
        record = self._base(request, FAILED, model, now_ms)
        record["error"] = error
        record["dispatched_at_ms"] = dispatched_at_ms
        return record
