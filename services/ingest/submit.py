"""``POST /v1/requests``: read, validate, envelope, publish; 202 or a refusal that names the problem.

Answers (the `IngestError` subclasses carry the refusals):

- 202 ``{request_id, tier, expire_at_ms, duplicate}`` once the broker acknowledged the record;
  ``duplicate`` is true when a resent `request_id` got the first attempt's answer back
- 400 not a JSON object within the bounds (`json_guard`), 408 the body came too slowly, 413 the
  body or its record over the limit, 422 a field breaks the contract (named in ``problems``), 429
  with Retry-After when the tier is full, 503 with Retry-After when Kafka does not acknowledge in
  time (a fixed message: librdkafka's reason goes to the log only)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.ingest.body import parse_submission, read_body
from services.ingest.envelope import Envelope, FieldRefusedError
from services.ingest.errors import IngestError, InvalidRequestError
from services.ingest.idempotency import Answer
from services.ingest.json_guard import JsonGuard
from services.ingest.metrics import IngestMetrics
from services.ingest.validation import SubmitRequest


class SubmissionPublisher(Protocol):
    """Writes an envelope durably (`services.ingest.publisher.Publisher`); raises `IngestError`."""

    async def publish(self, envelope: Envelope, *, idempotency_key: str | None) -> tuple[Answer, bool]: ...


def refusal_response(error: IngestError) -> JSONResponse:
    """The HTTP answer of a refusal."""
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers())


class SubmitEndpoint:
    """The ``POST /v1/requests`` handler (`handle`); counts each refusal by reason and tier."""

    def __init__(
        self,
        *,
        max_body_bytes: int,
        body_timeout_s: float,
        json_guard: JsonGuard,
        envelope_for: Callable[[SubmitRequest], Envelope],
        publisher: SubmissionPublisher,
        metrics: IngestMetrics,
    ) -> None:
        self._max_body_bytes = max_body_bytes
        self._body_timeout_s = body_timeout_s
        self._json_guard = json_guard
        self._envelope_for = envelope_for
        self._publisher = publisher
        self._metrics = metrics

    async def handle(self, request: Request) -> Response:
        try:
            raw = await read_body(request, self._max_body_bytes, timeout_s=self._body_timeout_s)
            submission = parse_submission(raw, self._json_guard)
            envelope = self._envelope(submission)
            answer, replayed = await self._publisher.publish(envelope, idempotency_key=submission.request_id)
        except IngestError as exc:
            self._metrics.refused(exc.reason, exc.tier)
            return refusal_response(exc)
        return JSONResponse(answer | {"duplicate": replayed}, status_code=202)

    def _envelope(self, submission: SubmitRequest) -> Envelope:
        try:
            return self._envelope_for(submission)
        except FieldRefusedError as exc:
            problems = [{"field": exc.field, "problem": str(exc)}]
            raise InvalidRequestError(problems, reason=exc.reason) from exc
