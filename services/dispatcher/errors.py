"""Dispatcher errors.

DispatcherError
 ├── BackendError        the LLM backend failed one call; `retriable` says whether a retry may help
 ├── RefusedRequestError a decodable request that must not run (``record_rules.py``, or its tenant's
 │                       ``tenant_check.py``; `cause` says which): dead-lettered and answered FAILED,
 │                       never sent to the LLM
 └── ConsumerError       the Kafka consumer failed one operation; `retriable` says whether a retry may help
      └── CommitFailedError  the group refused a commit (a rebalance, a lost membership): the offsets
                             stay owed and go out with the next commit, or the next owner redoes them
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferq.messaging.records import InferenceRequest
    from inferq.messaging.tiers import Tier


class DispatcherError(Exception):
    """Base of the dispatcher's errors."""


class BackendError(DispatcherError):
    def __init__(
        self,
        message: str,
        *,
        retriable: bool,
        status: int | None = None,
        retry_after_s: float | None = None,
        timed_out: bool = False,
        rate_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.retriable = retriable
        # The answer's rate-limit headers (a 429's), for the rate budget; never in the message.
        self.rate_headers: Mapping[str, str] = rate_headers or {}
        self.status = status
        self.retry_after_s = retry_after_s
        self.timed_out = timed_out

    @classmethod
    def timeout(cls, seconds: float) -> BackendError:
        """The call got no answer within `seconds` (retriable, and an overload signal)."""
        return cls(f"backend timed out after {seconds:.1f} s", retriable=True, timed_out=True)

    @property
    def overload(self) -> bool:
        """The backend is past its limit (429, 503, a timeout): a signal to cut the budget."""
        return self.timed_out or self.status in (429, 503)


class RefusedRequestError(DispatcherError):
    """`request` (its fields clamped) breaks a rule no clamp can fix; `reason` says which, short and
    free of the request's content. Its FAILED result goes to `reply_topic` (None: the default).
    `cause` is a metrics label: ``invalid`` (the record rules), ``unknown_tenant``, ``not_entitled``."""

    def __init__(
        self,
        reason: str,
        *,
        request: InferenceRequest,
        tier: Tier,
        reply_topic: str | None,
        cause: str = "invalid",
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cause = cause
        self.request = request
        self.tier = tier
        self.reply_topic = reply_topic


class ConsumerError(DispatcherError):
    """A consumer operation (reading offsets, lag, commit metadata) failed; nothing was changed."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class SessionTimeoutRefusedError(ConsumerError):
    """The brokers refuse the group session the dispatcher asks for (``group.min.session.timeout.ms``
    above it): an operator's setting to change, on either side."""

    def __init__(self, session_timeout_ms: int) -> None:
        super().__init__(
            f"the brokers refuse a group session of {session_timeout_ms} ms: set "
            f"group.min.session.timeout.ms to at most {session_timeout_ms} on every broker, or raise "
            "INFERQ_DISPATCHER_SESSION_TIMEOUT_MS (a dead dispatcher's partitions then wait that long)",
            retriable=False,
        )
        self.session_timeout_ms = session_timeout_ms


class CommitFailedError(ConsumerError):
    """The group did not accept a commit of these partitions (`topic[partition]` names)."""

    def __init__(self, message: str, *, partitions: Collection[str], retriable: bool) -> None:
        super().__init__(message, retriable=retriable)
        self.partitions = sorted(partitions)
