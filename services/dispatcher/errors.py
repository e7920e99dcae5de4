"""Dispatcher errors.

DispatcherError
 ├── BackendError        the LLM backend failed one call; `retriable` says whether a retry may help
 └── ConsumerError       the Kafka consumer failed one operation; `retriable` says whether a retry may help
      └── CommitFailedError  the group refused a commit (a rebalance, a lost membership): the offsets
                             stay owed and go out with the next commit, or the next owner redoes them
"""

from __future__ import annotations

from collections.abc import Collection


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
    ) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.status = status
        self.retry_after_s = retry_after_s
        self.timed_out = timed_out

    @property
    def overload(self) -> bool:
        """The backend is past its limit (429, 503, a timeout): a signal to cut the budget."""
        return self.timed_out or self.status in (429, 503)


class ConsumerError(DispatcherError):
    """A consumer operation (reading offsets, lag, commit metadata) failed; nothing was changed."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.retriable = retriable


class CommitFailedError(ConsumerError):
    """The group did not accept a commit of these partitions (`topic[partition]` names)."""

    def __init__(self, message: str, *, partitions: Collection[str], retriable: bool) -> None:
        super().__init__(message, retriable=retriable)
        self.partitions = sorted(partitions)
