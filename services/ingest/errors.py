"""Why ingest refuses a submission. Each error is one refusal a client can see.

IngestError                  base; `status_code`, `body()`, `headers()` are the HTTP answer,
 │                           `reason` (and `tier` once it is known) label the refusal metric
 ├── NotAuthenticatedError   401: no ``Authorization: Bearer <key>``, a malformed one, or an
 │                           unknown key (`reason`: unauthenticated_missing|_malformed|_unknown)
 ├── NotEntitledError        403: the key's tenant may not send this (`problems` names each field)
 ├── TenantRateLimitedError  429: the tenant's requests per minute are spent (its own Retry-After)
 ├── TenantOverShareError    429: the tenant is over its share of the tier's backlog
 ├── HeldLimitError          429: the tenant holds its limit of a held resource (streamed chats,
 │                           calls waiting for their answer, connections; Retry-After)
 ├── CallbackLookupsBusyError 429: the tenant's callback host lookups in flight are at its
 │                           `dns_lookups` limit (its own Retry-After)
 ├── MalformedBodyError      400: not UTF-8, not JSON within the bounds, not an object, or a body
 │                           whose length is not its Content-Length
 │    └── BodyIncompleteError the client disconnected before its body ended
 ├── BodyTimeoutError        408: the body did not arrive within the read deadline (connection closed)
 ├── BodyTooLargeError       413: the body is over `max_body_bytes`
 ├── RecordTooLargeError     413: the encoded record is over what the producer or topic accepts
 ├── InvalidRequestError     422: the body breaks the contract; `problems` names every field
 ├── OverCapacityError       429: the tier (or, for LOW, any tier) is full; carries the `Refusal`
 └── QueueUnavailableError   503: Kafka did not acknowledge the record in time (`retriable`)

A refusal names what is wrong; nothing is written to Kafka for any of them. A refusal's message is
fixed text, numbers and field names (cut to 64 characters), never the client's values or
librdkafka's words: the client sees a short reason, the log the detail (and never a prompt).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferq.ingest.admission import Refusal
from inferq.ingest.tenant_shares import ShareRefusal
from inferq.messaging.tiers import Tier
from inferq.tenancy.holds import HoldRefusal
from inferq.tenancy.rate import RateRefusal

Problem = dict[str, str]


class IngestError(Exception):
    """A submission refused. The subclass decides the status; the message is the body's `error`."""

    status_code = 500
    reason = "error"
    # Whether sending the same request again later may succeed.
    retriable = False
    tier: Tier | None = None

    def body(self) -> dict[str, Any]:
        """The JSON answer."""
        return {"error": str(self)}

    def headers(self) -> Mapping[str, str] | None:
        """Extra response headers (Retry-After)."""
        return None


class NotAuthenticatedError(IngestError):
    """No tenant could be named from the request's Authorization header: fixed text, never the key."""

    status_code = 401

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = f"unauthenticated_{reason}"

    def headers(self) -> Mapping[str, str]:
        # RFC 6750: how to authenticate; `invalid_token` when a credential was sent but is no good.
        if self.reason == "unauthenticated_missing":
            return {"WWW-Authenticate": 'Bearer realm="inferq"'}
        return {"WWW-Authenticate": 'Bearer realm="inferq", error="invalid_token"'}


class NotEntitledError(IngestError):
    """The tenant's entitlements do not cover the request; one problem per field, nothing written."""

    status_code = 403
    reason = "not_entitled"

    def __init__(self, tenant: str, problems: list[Problem]) -> None:
        summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
        super().__init__(f"tenant {tenant!r} is not entitled to this request: {summary}")
        self.problems = problems

    def body(self) -> dict[str, Any]:
        return super().body() | {"problems": self.problems}


class TenantRateLimitedError(IngestError):
    """The tenant spent its requests per minute; Retry-After is when its bucket has a token again."""

    status_code = 429
    reason = "tenant_rate_limited"
    retriable = True

    def __init__(self, refusal: RateRefusal) -> None:
        super().__init__(
            f"tenant {refusal.tenant!r} is over its quota of {refusal.requests_per_minute} requests per "
            f"minute (burst {refusal.burst}); retry later"
        )
        self.refusal = refusal

    def body(self) -> dict[str, Any]:
        r = self.refusal
        return super().body() | {
            "quota": "requests_per_minute",
            "tenant": r.tenant,
            "limit": r.requests_per_minute,
            "burst": r.burst,
            "retry_after_s": r.retry_after_s,
        }

    def headers(self) -> Mapping[str, str]:
        return {"Retry-After": str(self.refusal.retry_after_s)}


class HeldLimitError(IngestError):
    """The tenant holds its limit of one kind of held resource (`HoldRefusal`): nothing was taken or
    written; other tenants are unaffected."""

    status_code = 429
    reason = "held_limit"
    retriable = True

    def __init__(self, refusal: HoldRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal

    def body(self) -> dict[str, Any]:
        return self.refusal.body()

    def headers(self) -> Mapping[str, str]:
        return self.refusal.headers()


class _BacklogRefusedError(IngestError):
    """A 429 for a backlog that is full (the tier's, or the tenant's share of it): raised inside the
    idempotent publish, so a refused attempt is not remembered as an answer; its body and
    Retry-After are the refusal's."""

    status_code = 429
    retriable = True

    def __init__(self, refusal: Refusal | ShareRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal
        self.tier = refusal.tier

    def body(self) -> dict[str, Any]:
        return self.refusal.body()

    def headers(self) -> Mapping[str, str]:
        return {"Retry-After": str(self.refusal.retry_after_s)}


class TenantOverShareError(_BacklogRefusedError):
    """The tenant is over its share of the tier's backlog: other tenants are still admitted."""

    reason = "tenant_over_share"


class CallbackLookupsBusyError(IngestError):
    """The tenant has its `dns_lookups` of callback host lookups in flight: this submission's
    callback cannot be checked now (`inferq.webhooks.resolver`); other tenants are unaffected."""

    status_code = 429
    reason = "callback_lookups_busy"
    retriable = True

    def __init__(self, tenant: str, limit: int, retry_after_s: int) -> None:
        super().__init__(
            f"tenant {tenant!r} has {limit} callback host lookups in flight (dns_lookups); retry later"
        )
        self.tenant, self.limit, self.retry_after_s = tenant, limit, retry_after_s

    def body(self) -> dict[str, Any]:
        return super().body() | {
            "quota": "dns_lookups",
            "tenant": self.tenant,
            "limit": self.limit,
            "retry_after_s": self.retry_after_s,
        }

    def headers(self) -> Mapping[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class BodyTooLargeError(IngestError):
    status_code = 413
    reason = "too_large"

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"body larger than {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class BodyTimeoutError(IngestError):
    """The client sent its body too slowly: the connection is closed after the answer."""

    status_code = 408
    reason = "body_timeout"
    retriable = True

    def __init__(self, timeout_s: float, received_bytes: int) -> None:
        super().__init__(f"request body not received within {timeout_s:g} s")
        self.timeout_s = timeout_s
        self.received_bytes = received_bytes

    def headers(self) -> Mapping[str, str]:
        # A sender this slow holds a connection for nothing: drop it (uvicorn closes after the answer).
        return {"Connection": "close"}


class RecordTooLargeError(IngestError):
    """The body was within its limit but its record is not: Kafka would refuse it (not a 503)."""

    status_code = 413
    reason = "record_too_large"

    def __init__(self, record_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"request too large: its record is {record_bytes} bytes, the queue takes at most {limit_bytes}"
            " (text outside ASCII takes 2-4 bytes per character)"
        )
        self.record_bytes = record_bytes
        self.limit_bytes = limit_bytes


class MalformedBodyError(IngestError):
    """Not UTF-8, not JSON within the bounds, JSON that is not an object, or a lying Content-Length."""

    status_code = 400
    reason = "malformed"


class BodyIncompleteError(MalformedBodyError):
    """The client went away before its body ended."""

    reason = "disconnected"


class InvalidRequestError(IngestError):
    """A JSON object that breaks the request contract; one problem per field."""

    status_code = 422
    reason = "invalid"

    def __init__(self, problems: list[Problem], *, reason: str = "invalid") -> None:
        summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
        super().__init__(f"invalid request: {summary}")
        self.problems = problems
        self.reason = reason

    def body(self) -> dict[str, Any]:
        body = super().body()
        if self.problems:
            body["problems"] = self.problems
        return body


class OverCapacityError(_BacklogRefusedError):
    """The tier's backlog (or, for LOW first, a higher tier's) is at its capacity."""

    reason = "over_capacity"


class QueueUnavailableError(IngestError):
    """The broker did not acknowledge within the produce timeout. `detail` is librdkafka's reason,
    for the log only: the client gets a fixed message, not the cluster's internals."""

    status_code = 503
    reason = "kafka_unavailable"
    retriable = True

    def __init__(self, tier: Tier, detail: str) -> None:
        super().__init__("queue unavailable, retry later")
        self.tier = tier
        self.detail = detail

    def headers(self) -> Mapping[str, str]:
        # How long the outage lasts is unknown; the client already waited the produce timeout.
        return {"Retry-After": "1"}
