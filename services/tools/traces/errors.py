"""Errors of `services.tools.traces`: files that are not what they claim to be, each named."""

from __future__ import annotations

from pathlib import Path


class TracesError(Exception):
    """Base of every error raised by `services.tools.traces`."""


class TraceError(TracesError):
    """A trace file (JSONL of arrivals or Avro of requests) that cannot be read; names the file and,
    when known, the line."""

    def __init__(self, path: Path, reason: str, *, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason
