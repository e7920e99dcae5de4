"""Why ingest refuses a submission. Each error is one refusal a client can see.

IngestError                  base; `status_code`, `body()`, `headers()` are the HTTP answer,
 │                           `reason` (and `tier` once it is known) label the refusal metric
 ├── BodyTooLargeError       413: the body is over `max_body_bytes`
 ├── MalformedBodyError      400: the body is not a JSON object
 ├── InvalidRequestError     422: the body breaks the contract; `problems` names every field
 ├── OverCapacityError       429: the tier (or, for LOW, any tier) is full; carries the `Refusal`
 └── QueueUnavailableError   503: Kafka did not acknowledge the record in time (`retriable`)

A refusal names what is wrong; nothing is written to Kafka for any of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.ingest.admission import Refusal
from services.messaging.tiers import Tier

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


class BodyTooLargeError(IngestError):
    status_code = 413
    reason = "too_large"

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"body larger than {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class MalformedBodyError(IngestError):
    """Not JSON, not UTF-8, or JSON that is not an object."""

    status_code = 400
    reason = "malformed"


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


class OverCapacityError(IngestError):
    """Raised inside the idempotent publish so a refused attempt is not remembered as an answer."""

    status_code = 429
    reason = "over_capacity"
    retriable = True

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal
        self.tier = refusal.tier

    def body(self) -> dict[str, Any]:
        return self.refusal.body()

    def headers(self) -> Mapping[str, str]:
        return {"Retry-After": str(self.refusal.retry_after_s)}


class QueueUnavailableError(IngestError):
    """The broker did not acknowledge within the produce timeout; `detail` is librdkafka's reason."""

    status_code = 503
    reason = "kafka_unavailable"
    retriable = True

    def __init__(self, tier: Tier, detail: str) -> None:
        super().__init__(f"queue unavailable, retry later: {detail}")
        self.tier = tier
        self.detail = detail

    def headers(self) -> Mapping[str, str]:
        # How long the outage lasts is unknown; the client already waited the produce timeout.
        return {"Retry-After": "1"}
