"""Builds `InferenceResult` records; every terminal outcome goes through here."""

from __future__ import annotations

from dataclasses import dataclass

from inferq.dispatcher.backend import Completion
from inferq.messaging.records import InferenceRequest, InferenceResult, Status, Usage, recorded_choices


@dataclass(frozen=True)
class OutcomeBuilder:
    dispatcher_id: str

    def _base(
        self,
        request: InferenceRequest,
        status: Status,
        model: str,
        now_ms: int,
        *,
        error: str | None = None,
        dispatched_at_ms: int | None = None,
    ) -> InferenceResult:
        return InferenceResult(
            request_id=request.request_id,
            tier=request.tier,
            status=status,
            model=model,
            enqueued_at_ms=request.created_at_ms,
            completed_at_ms=now_ms,
            attempts=request.attempt,
            dispatcher_id=self.dispatcher_id,
            error=error,
            dispatched_at_ms=dispatched_at_ms,
            tenant=request.tenant,
            callback_url=request.callback_url,
        )

    def ok(
        self, request: InferenceRequest, completion: Completion, *, dispatched_at_ms: int, now_ms: int
    ) -> InferenceResult:
        return InferenceResult(
            request_id=request.request_id,
            tier=request.tier,
            status=Status.OK,
            model=completion.model,
            enqueued_at_ms=request.created_at_ms,
            completed_at_ms=now_ms,
            attempts=request.attempt,
            dispatcher_id=self.dispatcher_id,
            # An embedding's answer is its vectors: no text.
            output=completion.output if completion.embeddings is None else None,
            usage=Usage(
                completion.prompt_tokens,
                completion.completion_tokens,
                completion.total_tokens,
                completion.prompt_tokens_details,
                completion.completion_tokens_details,
            ),
            dispatched_at_ms=dispatched_at_ms,
            tenant=request.tenant,
            callback_url=request.callback_url,
            finish_reason=completion.finish_reason,
            system_fingerprint=completion.system_fingerprint,
            tool_calls=completion.tool_calls,
            choices=recorded_choices(completion.choices),
            embeddings=completion.embeddings,
        )

    def expired(self, request: InferenceRequest, model: str, *, now_ms: int) -> InferenceResult:
        late = now_ms - request.expire_at_ms
        error = f"deadline passed {late} ms before dispatch; not sent to the LLM"
        return self._base(request, Status.EXPIRED, model, now_ms, error=error)

    def evicted(self, request: InferenceRequest, model: str, *, now_ms: int) -> InferenceResult:
        error = "peak hours, batch delayed: evicted to make room for higher tiers; resubmit later"
        return self._base(request, Status.EVICTED, model, now_ms, error=error)

    def failed(
        self,
        request: InferenceRequest,
        model: str,
        error: str,
        *,
        dispatched_at_ms: int | None,
        now_ms: int,
    ) -> InferenceResult:
        return self._base(
            request, Status.FAILED, model, now_ms, error=error, dispatched_at_ms=dispatched_at_ms
        )
