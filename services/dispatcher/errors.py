"""Dispatcher errors.

DispatcherError
 └── BackendError      the LLM backend failed one call; `retriable` says whether a retry may help
"""

from __future__ import annotations


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
