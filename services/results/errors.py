"""Errors of the results service.

ResultsError
 └── StoreNotOpenError   a store call before `open()` or after `close()`
"""

from __future__ import annotations


class ResultsError(Exception):
    """Base of the results service's errors."""


class StoreNotOpenError(ResultsError):
    """The result store was never opened, or is closed; `path` is its database."""

    def __init__(self, path: str) -> None:
        super().__init__(f"result store {path} is not open")
        self.path = path
