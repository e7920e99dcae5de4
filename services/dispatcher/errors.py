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
    ) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.status = status
        self.retry_after_s = retry_after_s
