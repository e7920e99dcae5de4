"""Errors of the tenancy package.

TenancyError                base
 ├── TenantsFileError       the tenants file cannot be used: `problems` lists each with its line
 │                          (TOML syntax from tomllib; a field's own line, else its [[tenants]] entry's)
 ├── AuthenticationError    a request's Authorization names no tenant: `reason` is missing,
 │                          malformed or unknown; the message is fixed text (never the key)
 └── OpenModeRefusedError   no tenants file and a bind address that is not loopback

No message of these errors quotes a key or a key hash: they go to logs and HTTP answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Why ingest and the dispatcher refuse a tenants file (they sign the request records they write).
NO_SERVICE_KEY = (
    "[service] record_keys is missing: ingest and the dispatcher sign the request records they write "
    'with its first key (`inferq tenants record-key` prints one; docs/tenants.md, "Records written '
    'to Kafka")'
)


class TenancyError(Exception):
    """Base of every error raised by `inferq.tenancy`."""


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong with a tenants file: where (line, column when known; the entry it belongs to)
    and what. `problem` never quotes a key hash or a key."""

    problem: str
    line: int | None = None
    column: int | None = None
    entry: str | None = None

    def describe(self, path: Path | str) -> str:
        where = f"{path}:{self.line}" if self.line is not None else str(path)
        if self.line is not None and self.column is not None:
            where += f":{self.column}"
        entry = f" {self.entry}:" if self.entry else ""
        return f"{where}:{entry} {self.problem}"


class TenantsFileError(TenancyError):
    """The tenants file at `path` cannot be used; one line per problem, each naming its line."""

    def __init__(self, path: Path | str, problems: Sequence[FileProblem]) -> None:
        self.path = Path(path)
        self.problems = tuple(problems)
        super().__init__("\n".join(p.describe(path) for p in self.problems))


class AuthenticationError(TenancyError):
    """A request that names no tenant (401). `reason`: "missing", "malformed" or "unknown"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class OpenModeRefusedError(TenancyError):
    """Open mode (no tenants file: anyone is served without a key) on an address others can reach."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"no tenants file (INFERQ_TENANTS_FILE is not set): open mode serves anyone without a key, "
            f"so it binds only to a loopback address, and {host!r} is not one; "
            "set INFERQ_TENANTS_FILE (see infra/tenants.example.toml) or bind to 127.0.0.1"
        )
        self.host = host
