"""``POST /v1/requests``: read, validate, record, publish; 202 or a refusal that names the problem.

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
tenant's rate, the body, its fields, the record, the tenant's entitlements, then the publish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.ingest.body import parse_submission, read_body
from inferq.ingest.callbacks import CallbackCheck
from inferq.ingest.deadlines import FieldRefusedError
from inferq.ingest.errors import IngestError, InvalidRequestError
from inferq.ingest.idempotency import Answer
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.metrics import IngestMetrics
from inferq.ingest.record import RecordRules, submitted_record
from inferq.ingest.tenants import TenantGate
from inferq.ingest.validation import SubmitRequest
from inferq.messaging.records import InferenceRequest
from inferq.tenancy.auth import Principal


class SubmissionPublisher(Protocol):
    """Writes a record durably (`inferq.ingest.publisher.Publisher`); raises `IngestError`."""

    async def publish(
        self, request: InferenceRequest, *, idempotency_key: str | None
    ) -> tuple[Answer, bool]: ...


@dataclass(frozen=True)
class Admitted:
    """A record the broker acknowledged: the 202 body, and whether it replayed an earlier answer."""

    answer: Answer
    replayed: bool


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
        rules: RecordRules,
        publisher: SubmissionPublisher,
        metrics: IngestMetrics,
        tenants: TenantGate,
        callbacks: CallbackCheck | None = None,
    ) -> None:
        self._max_body_bytes = max_body_bytes
        self._body_timeout_s = body_timeout_s
        self._json_guard = json_guard
        self._rules = rules
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
            record = await self.record(submission, principal)
            admitted = await self.publish(record, idempotency_key=submission.request_id)
        except IngestError as exc:
            self.refused(exc, principal)
            return refusal_response(exc)
        return JSONResponse(admitted.answer | {"duplicate": admitted.replayed}, status_code=202)

    # The steps of a submission, in order, for every endpoint that takes one: `caller`, `body`
    # (then the endpoint parses it and makes its record by `rules`, `entitled`), `publish`. Each
    # raises an `IngestError` for what it refuses; the endpoint hands it to `refused` to be counted.

    @property
    def rules(self) -> RecordRules:
        """The rules a record is made by (tier, deadline, topics, region, clock)."""
        return self._rules

    def caller(self, request: Request) -> Principal:
        """Who is calling (before the body is read: an unknown caller costs a header check)."""
        return self._tenants.caller(request)

    async def body(self, request: Request, principal: Principal) -> bytes:
        """The caller's rate spent, then the body read within the bounds."""
        self._tenants.take_rate(principal)
        return await read_body(request, self._max_body_bytes, timeout_s=self._body_timeout_s)

    async def record(self, submission: SubmitRequest, principal: Principal) -> InferenceRequest:
        """The record of `submission` as the tenant may send it: its callback checked, its tenant
        the key's, the tier and deadline within the tenant's entitlements."""
        if self._callbacks is not None:
            await self._callbacks.check(submission.callback_url, principal)
        asked_tenant = submission.tenant if "tenant" in submission.model_fields_set else None
        tenant = self._tenants.tenant_of(principal, asked_tenant)
        entitled = principal.tenant.entitlements
        try:
            record = submitted_record(
                submission,
                self._rules,
                tenant=tenant,
                max_tier=entitled.max_tier,
                max_deadline_ms=entitled.max_deadline_ms,
            )
        except FieldRefusedError as exc:
            problems = [{"field": exc.field, "problem": str(exc)}]
            raise InvalidRequestError(problems, reason=exc.reason) from exc
        return self.entitled(record, principal, deadline_asked=submission.deadline_ms is not None)

    def entitled(
        self, record: InferenceRequest, principal: Principal, *, deadline_asked: bool
    ) -> InferenceRequest:
        """`record` as the tenant may send it (`TenantGate.entitle`: 403 naming what it may not)."""
        return self._tenants.entitle(record, principal, deadline_asked=deadline_asked)

    async def publish(self, record: InferenceRequest, *, idempotency_key: str | None) -> Admitted:
        """`record` written and acknowledged (idempotent per tenant on `idempotency_key`)."""
        answer, replayed = await self._publisher.publish(record, idempotency_key=idempotency_key)
        return Admitted(answer, replayed)

    def refused(self, error: IngestError, principal: Principal | None) -> None:
        """Counts a refusal by reason, tier and tenant (as far as they are known)."""
        self._metrics.refused(error.reason, error.tier, tenant=None if principal is None else principal.label)
