"""Errors of `inferq report` (and of the documents `inferq simulate` writes)."""

from __future__ import annotations

from pathlib import Path


class ReportError(Exception):
    """Base of every error raised by `inferq.tools.report`."""


class DocumentError(ReportError):
    """A simulate/report document or a results file that cannot be read; names the file."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class SourceError(ReportError):
    """The results topic could not be read (broker unreachable, topic missing, read timed out)."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"cannot read {topic}: {reason}")
        self.topic = topic
        self.reason = reason
