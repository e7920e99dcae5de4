"""Errors of `inferq simulate` and `inferq report`."""

from __future__ import annotations

from pathlib import Path


class AnalysisError(Exception):
    """Base of every error raised by `services.tools.analysis`."""


class TraceError(AnalysisError):
    """A trace, results or document file that cannot be read; names the file and, when known, the line."""

    def __init__(self, path: Path, reason: str, *, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


class SourceError(AnalysisError):
    """The results topic could not be read (broker unreachable, topic missing, read timed out)."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"cannot read {topic}: {reason}")
        self.topic = topic
        self.reason = reason
