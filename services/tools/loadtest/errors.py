"""Errors of the load-test tools; each names what the user has to fix."""

from __future__ import annotations


class LoadtestError(Exception):
    """Base of every error raised by `inferq.tools.loadtest`."""


class TimeRangeError(LoadtestError):
    """A --from/--to that cannot be read as an instant, or a range that ends before it starts."""


class TraceFileError(LoadtestError):
    """A file that is not an inferq trace (wrong schema, not Avro, unreadable)."""


class ReplayError(LoadtestError):
    """Records that could not be read or re-published within the bounds we wait."""
