"""Errors of `inferq.tools.traces`: scenario and trace files that cannot be used, each named."""

from __future__ import annotations

from pathlib import Path


class TracesError(Exception):
    """Base of every error raised by `inferq.tools.traces`."""


class ScenarioError(TracesError):
    """A scenario file that breaks the format. `key` is the dotted path of the offending key."""

    def __init__(self, source: Path | str, key: str, problem: str) -> None:
        where = f"{source}: {key}" if key else str(source)
        super().__init__(f"{where}: {problem}")
        self.source = str(source)
        self.key = key
        self.problem = problem


class TraceError(TracesError):
    """A trace file (JSONL of arrivals or Avro of requests) that cannot be read; names the file and,
    when known, the line."""

    def __init__(self, path: Path, reason: str, *, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason
