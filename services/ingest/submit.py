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

from dataclasses import dataclass, replace
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.ingest.body import parse_submission, read_body
from inferq.ingest.callbacks import CallbackCheck
from inferq.ingest.deadlines import FieldRefusedError, within_patience
from inferq.ingest.envelope import Envelope
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
        principal: Principal | None = None
        try:
            principal = self.caller(request)
            raw = await self.body(request, principal)
            submission = parse_submission(raw, self._json_guard)
            envelope = await self.record(submission, principal)
            admitted = await self.publish(envelope, idempotency_key=submission.request_id)
        except IngestError as exc:
            self.refused(exc, principal)
            return refusal_response(exc)
        return JSONResponse(admitted.answer | {"duplicate": admitted.replayed}, status_code=202)

    # The steps of a submission, in order, for every endpoint that takes one: `caller`, `body`
    # (then the endpoint parses it into a `SubmitRequest`), `record`, `publish`. Each raises an
    # `IngestError` for what it refuses; the endpoint hands it to `refused` to be counted.

    def caller(self, request: Request) -> Principal:
        """Who is calling (before the body is read: an unknown caller costs a header check)."""
        return self._tenants.caller(request)

    async def body(self, request: Request, principal: Principal) -> bytes:
        """The caller's rate spent, then the body read within the bounds."""
        self._tenants.take_rate(principal)
        return await read_body(request, self._max_body_bytes, timeout_s=self._body_timeout_s)

    async def record(
        self, submission: SubmitRequest, principal: Principal, *, patience_ms: int | None = None
    ) -> Envelope:
        """The record of `submission` as the tenant may send it: its callback checked, the tier and
        deadline within the tenant's entitlements, the deadline then cut to the caller's
        `patience_ms` (a chat SDK's timeout)."""
        if self._callbacks is not None:
            await self._callbacks.check(submission, principal)
        envelope = self._envelope(submission, principal)
        request = envelope.request
        expire_at_ms = within_patience(request.created_at_ms, request.expire_at_ms, patience_ms)
        if expire_at_ms == request.expire_at_ms:
            return envelope
        return Envelope(envelope.topic, replace(request, expire_at_ms=expire_at_ms))

    async def publish(self, envelope: Envelope, *, idempotency_key: str | None) -> Admitted:
        """`envelope` written and acknowledged (idempotent per tenant on `idempotency_key`)."""
        answer, replayed = await self._publisher.publish(envelope, idempotency_key=idempotency_key)
        return Admitted(answer, replayed, envelope)

    def refused(self, error: IngestError, principal: Principal | None) -> None:
        """Counts a refusal by reason, tier and tenant (as far as they are known)."""
        self._metrics.refused(error.reason, error.tier, tenant=None if principal is None else principal.label)

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
