"""``POST /v1/requests``: read, validate, envelope, publish; 202 or a refusal that names the problem.

Answers (the `IngestError` subclasses carry the refusals):

- 202 ``{request_id, tier, expire_at_ms, duplicate}`` once the broker acknowledged the record;
  ``duplicate`` is true when a resent `request_id` got the first attempt's answer back (per tenant)
- 401 no key, a malformed one or an unknown one; 403 a field the tenant is not entitled to (named
  in ``problems``), or a body `tenant` that is not the key's
- 400 not a JSON object within the bounds (`json_guard`), 408 the body came too slowly, 413 the
  body or its record over the limit, 422 a field breaks the contract (named in ``problems``; a
  `callback_url` the webhook rules refuse: `inferq.ingest.callbacks`), 429
  with Retry-After when the tenant's rate is spent, the tenant is over its share of the tier's
  backlog, or the tier is full, 503 with Retry-After when Kafka does not acknowledge in time (a
  fixed message: librdkafka's reason goes to the log only)

The order: authenticate (before the body is read: an unknown caller costs a header check), the
tenant's rate, the body, its fields, the envelope, the tenant's entitlements, then the publish.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.ingest.body import parse_submission, read_body
from inferq.ingest.callbacks import CallbackCheck
from inferq.ingest.envelope import Envelope, FieldRefusedError
from inferq.ingest.errors import IngestError, InvalidRequestError
from inferq.ingest.idempotency import Answer
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.metrics import IngestMetrics
from inferq.ingest.tenants import TenantGate
from inferq.ingest.validation import SubmitRequest
from inferq.messaging.tiers import Tier
from inferq.tenancy.auth import Principal


class EnvelopeMaker(Protocol):
    """Builds the record of a submission (`inferq.ingest.envelope.EnvelopeFactory`)."""

    def __call__(
        self,
        body: SubmitRequest,
        *,
        tenant: str | None = None,
        max_tier: Tier | None = None,
        max_deadline_ms: int | None = None,
    ) -> Envelope: ...


class SubmissionPublisher(Protocol):
    """Writes an envelope durably (`inferq.ingest.publisher.Publisher`); raises `IngestError`."""

    async def publish(self, envelope: Envelope, *, idempotency_key: str | None) -> tuple[Answer, bool]: ...


@dataclass(frozen=True)
class Admitted:
    """A submission the broker acknowledged: the 202 body, whether it replayed an earlier answer,
    and the record as written."""

    answer: Answer
    replayed: bool
    envelope: Envelope


def refusal_response(error: IngestError) -> JSONResponse:
    """The HTTP answer of a refusal."""
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers())


class SubmitEndpoint:
    """The ``POST /v1/requests`` handler (`handle`); counts each refusal by reason, tier and tenant
    (as far as they are known when it is refused)."""

    def __init__(
        self,
        *,
        max_body_bytes: int,
        body_timeout_s: float,
        json_guard: JsonGuard,
        envelope_for: EnvelopeMaker,
        publisher: SubmissionPublisher,
        metrics: IngestMetrics,
        tenants: TenantGate,
        callbacks: CallbackCheck | None = None,
    ) -> None:
        self._max_body_bytes = max_body_bytes
        self._body_timeout_s = body_timeout_s
        self._json_guard = json_guard
        self._envelope_for = envelope_for
        self._publisher = publisher
        self._metrics = metrics
        self._tenants = tenants
        self._callbacks = callbacks

    async def handle(self, request: Request) -> Response:
        try:
            admitted = await self.admit(request, lambda raw: parse_submission(raw, self._json_guard))
        except IngestError as exc:
            return refusal_response(exc)
        return JSONResponse(admitted.answer | {"duplicate": admitted.replayed}, status_code=202)

    async def admit(
        self,
        request: Request,
        parse: Callable[[bytes], SubmitRequest],
        *,
        finish: Callable[[Envelope], Envelope] | None = None,
        idempotent: bool = True,
    ) -> Admitted:
        """The whole path of a submission, for every endpoint that takes one: the caller, its rate,
        the body (read within the bounds, then `parse`d into a `SubmitRequest`; `parse` raises an
        `IngestError` for a body it refuses), the envelope and the tenant's entitlements, then
        `finish` (the caller's last word on the record, and its chance to get ready for the outcome
        before it can exist), then the publish (idempotent on the body's `request_id` when
        `idempotent`). Every refusal is counted and raised as an `IngestError`."""
        label: str | None = None
        try:
            principal = self._tenants.caller(request)
            label = principal.label
            self._tenants.take_rate(principal)
            raw = await read_body(request, self._max_body_bytes, timeout_s=self._body_timeout_s)
            submission = parse(raw)
            if self._callbacks is not None:
                await self._callbacks.check(submission, principal)
            envelope = self._envelope(submission, principal)
            if finish is not None:
                envelope = finish(envelope)
            key = submission.request_id if idempotent else None
            answer, replayed = await self._publisher.publish(envelope, idempotency_key=key)
        except IngestError as exc:
            self._metrics.refused(exc.reason, exc.tier, tenant=label)
            raise
        return Admitted(answer, replayed, envelope)

    def _envelope(self, submission: SubmitRequest, principal: Principal) -> Envelope:
        tenant = self._tenants.tenant_of(principal, submission)
        entitled = principal.tenant.entitlements
        try:
            envelope = self._envelope_for(
                submission,
                tenant=tenant,
                max_tier=entitled.max_tier,
                max_deadline_ms=entitled.max_deadline_ms,
            )
        except FieldRefusedError as exc:
            problems = [{"field": exc.field, "problem": str(exc)}]
            raise InvalidRequestError(problems, reason=exc.reason) from exc
        return self._tenants.entitle(envelope, principal, submission)
