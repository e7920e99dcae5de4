"""What a call through the client can end in, other than an answer.

InferqError                    base of everything the client raises
 ├── RefusedError              the queue would not take the request now (HTTP 429 or 503): send the
 │                             same request again after `retry_after_s` (None when not said)
 ├── InvalidRequestError       the request breaks the contract (400, 413, 422, or the same rules checked
 │                             before a Kafka produce): `problems` names each field; sending it again
 │                             cannot help
 ├── NotAuthorizedError        401 (no valid key) or 403 (the tenant may not send this)
 ├── OutcomeError              the request ran to a terminal outcome other than OK (`outcome`)
 │    ├── ExpiredError         EXPIRED: its deadline passed before it could run
 │    ├── EvictedError         EVICTED: pushed out by higher-priority work ("peak hours, batch delayed")
 │    └── FailedError          FAILED: the backend or the dispatcher gave up (`outcome.error`)
 │         └── RejectedError   REJECTED: the dispatcher refused it (the tenant may not send it: what
 │                             the HTTP API answers 403 for); a FailedError too, as before
 ├── WaitTimeoutError         no outcome within the wait (also a `TimeoutError`); the request may still
 │                             complete: ask again with `result(request_id)`
 └── TransportError            inferq could not be reached or answered unexpectedly (`retriable`)

Messages carry the request id, statuses and the server's short reason, never a key or a prompt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferq.client.models import Outcome


class InferqError(Exception):
    """Base of the client's errors. `retriable`: whether the same call later may succeed."""

    retriable = False


class RefusedError(InferqError):
    retriable = True

    def __init__(self, message: str, *, status_code: int, retry_after_s: float | None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after_s = retry_after_s


class InvalidRequestError(InferqError):
    def __init__(self, message: str, *, status_code: int, problems: Sequence[Mapping[str, str]] = ()) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.problems = [dict(p) for p in problems]


class NotAuthorizedError(InferqError):
    def __init__(self, message: str, *, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class OutcomeError(InferqError):
    """The request ended without an answer; `outcome` says how (status, error, timings)."""

    def __init__(self, outcome: Outcome) -> None:
        reason = f": {outcome.error}" if outcome.error else ""
        super().__init__(f"request {outcome.request_id} ended {outcome.status}{reason}")
        self.outcome = outcome

    @property
    def request_id(self) -> str:
        return self.outcome.request_id


class ExpiredError(OutcomeError):
    pass


class EvictedError(OutcomeError):
    retriable = True


class FailedError(OutcomeError):
    pass


class RejectedError(FailedError):
    pass


class WaitTimeoutError(InferqError, TimeoutError):
    retriable = True

    def __init__(self, request_id: str, waited_s: float) -> None:
        super().__init__(f"no outcome for request {request_id} within {waited_s:g} s (it may still complete)")
        self.request_id = request_id
        self.waited_s = waited_s


class TransportError(InferqError):
    def __init__(self, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.retriable = retriable
