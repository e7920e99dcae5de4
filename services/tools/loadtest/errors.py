"""Errors of the load-test tools; each names what the user has to fix."""

from __future__ import annotations

from pathlib import Path


class LoadtestError(Exception):
    """Base of every error raised by `services.tools.loadtest`."""


class ScenarioError(LoadtestError):
    """A scenario file that breaks the format. `key` is the dotted path of the offending key."""

    def __init__(self, source: Path | str, key: str, problem: str) -> None:
        where = f"{source}: {key}" if key else str(source)
        super().__init__(f"{where}: {problem}")
        self.source = str(source)
        self.key = key
        self.problem = problem


class TimeRangeError(LoadtestError):
    """A --from/--to that cannot be read as an instant, or a range that ends before it starts."""


class TraceFileError(LoadtestError):
    """A file that is not an inferq trace (wrong schema, not Avro, unreadable)."""


class ReplayError(LoadtestError):
    """Records that could not be read or re-published within the bounds we wait."""
