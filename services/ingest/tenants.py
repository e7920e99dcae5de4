"""Ingest's side of tenancy: who is calling (401), whether their rate allows it (429), whether they
may hold one more streamed chat or waiting call (429), which tenant the record belongs to (403 when
the body says another) and whether their entitlements cover it (403).

The rules themselves live in `inferq.tenancy`; this module turns their answers into `IngestError`
refusals. In open mode (no tenants file) the caller is anonymous: no key, no rate, the global rules,
and the body's `tenant` (default ``default``) scopes the request as before.
"""

from __future__ import annotations

from starlette.requests import Request

from inferq.ingest.errors import (
    HeldLimitError,
    NotAuthenticatedError,
    NotEntitledError,
    TenantRateLimitedError,
)
from inferq.messaging.records import InferenceRequest
from inferq.messaging.topics import TopicNames
from inferq.tenancy.auth import Principal
from inferq.tenancy.entitlements import apply_entitlements
from inferq.tenancy.errors import AuthenticationError
from inferq.tenancy.holds import HeldKind, HeldResources, HoldRefusal, Lease
from inferq.tenancy.rate import RateLimiter
from inferq.tenancy.registry import TenantRegistry


class TenantGate:
    """The tenant checks of one request, in the order the endpoint runs them."""

    def __init__(
        self,
        registry: TenantRegistry,
        limiter: RateLimiter,
        *,
        topics: TopicNames,
        default_reply_topic: str | None = None,
        holds: HeldResources | None = None,
    ) -> None:
        self._registry = registry
        self._limiter = limiter
        self.holds = holds or HeldResources()
        # Every tenant may be answered here (a regional ingest's reply topic); others need entitling.
        self._default_reply_topic = default_reply_topic or topics.results
        # The buckets follow the file: sized at start, re-sized at every reload.
        registry.on_change(limiter.configure)

    def caller(self, request: Request) -> Principal:
        """The principal of `request`; `NotAuthenticatedError` (401) when its key names no tenant."""
        try:
            return self._registry.authenticate(request.headers.getlist("authorization"))
        except AuthenticationError as exc:
            raise NotAuthenticatedError(exc.reason, str(exc)) from None

    def take_rate(self, principal: Principal) -> None:
        """Spend one of the tenant's requests per minute; `TenantRateLimitedError` (429) when none is left."""
        if not principal.authenticated:
            return
        refusal = self._limiter.take(principal.name)
        if refusal is not None:
            raise TenantRateLimitedError(refusal)

    def hold(self, principal: Principal, kind: HeldKind) -> Lease:
        """One of the tenant's `kind` held until the lease is released; `HeldLimitError` (429) when
        it holds its limit already (its limits are the file's in force for this request)."""
        lease = self.holds.acquire(principal.tenant, kind)
        if isinstance(lease, HoldRefusal):
            raise HeldLimitError(lease)
        return lease

    def tenant_of(self, principal: Principal, asked: str | None) -> str:
        """The record's tenant: the key's. A body naming another (`asked`: the one it names, None when
        it names none) is refused (403); open mode keeps the body's (or ``default``)."""
        if not principal.authenticated:
            return "default" if asked is None else asked
        if asked is not None and asked != principal.name:
            problem = f"this key belongs to tenant {principal.name!r}; leave tenant out or send that"
            raise NotEntitledError(principal.name, [{"field": "tenant", "problem": problem}])
        return principal.name

    def entitle(
        self, request: InferenceRequest, principal: Principal, *, deadline_asked: bool
    ) -> InferenceRequest:
        """The record as the tenant may send it (max_tokens filled, the tier capped: the record was
        built with the tenant's tier and deadline caps already, so that the deadline is the lowered
        tier's); `NotEntitledError` (403) naming every field it is not entitled to, the deadline as
        ``deadline_ms`` when the caller gave a relative one (`deadline_asked`)."""
        verdict = apply_entitlements(
            request, principal.tenant.entitlements, default_reply_topic=self._default_reply_topic
        )
        if not verdict.allowed:
            problems = [p.as_dict() for p in verdict.problems]
            if deadline_asked:
                # The caller spoke of deadline_ms: name the field it sent, not the record's.
                for p in problems:
                    if p["field"] == "expire_at_ms":
                        p["field"] = "deadline_ms"
            raise NotEntitledError(principal.name, problems)
        return verdict.request
