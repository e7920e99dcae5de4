"""A load run's identity and its record file: what was sent, when, and what the pipeline answered.

Every request of a run has the id ``<run_id>:<n>``, so its result can be found on the reply topic
or at ``GET /v1/requests/{id}`` and told apart from every other run's. The records are written as
JSON lines while the run goes (`requests.jsonl`), so an interrupted run keeps what it did; a
`run.json` beside them holds the run's settings and summary for a report.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

# The ingest API's request_id alphabet (services/ingest/validation.py), leaving room for ":<n>".
_RUN_ID = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")
RUNS_DIR = Path(".inferq") / "runs"


def new_run_id(now_s: float | None = None, *, prefix: str = "lg") -> str:
    """A short id that sorts by start time: ``lg-20250101T201500-3fa2`` (local time of the machine)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(time.time() if now_s is None else now_s))
    # Two runs started in the same second must not share ids.
    return f"{prefix}-{stamp}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run id must be 1-64 letters, digits, '.', '_' or '-', got {run_id!r}")
    return run_id


def request_id(run_id: str, n: int) -> str:
    return f"{run_id}:{n}"


def default_out(run_id: str) -> Path:
    return RUNS_DIR / run_id / "requests.jsonl"


@dataclass
class RequestRecord:
    """One request of a run, as a report needs it. Times are epoch milliseconds."""

    n: int
    request_id: str
    scenario: str
    tier: str  # the tier hint from the scenario map; `answer_tier` is what ingest chose
    kind: str
    session_id: str
    offset_ms: int  # in the scenario's own time, before --speed
    due_ms: int  # when the request should have been sent (after --speed)
    sent_ms: int
    answered_ms: int
    outcome: str  # accepted, refused (429), unavailable (503) or error
    status: int | None = None  # HTTP status; None via Kafka
    answer_tier: str | None = None
    expire_at_ms: int | None = None
    retry_after_s: float | None = None
    error: str | None = None
    tenant: str | None = None  # the tenant it was sent for; None in files from before tenants


class RunWriter:
    """Appends request records as JSON lines; `close()` writes `run.json` beside them."""

    def __init__(self, out: Path) -> None:
        self.path = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = out.open("w", encoding="utf-8")
        self.written = 0

    def write(self, record: RequestRecord) -> None:
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        self._file.write(json.dumps(asdict(record), separators=(",", ":")) + "\n")
        self.written += 1

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self, meta: dict[str, Any]) -> Path:
        """Close the records file and write the run's settings and summary; returns run.json's path."""
        if self._file is not None:
            self._file.close()
            self._file = None
        meta_path = self.path.parent / "run.json"
        meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return meta_path


def read_records(path: Path) -> list[RequestRecord]:
    """The records of a run file (for reports and tests)."""
    with path.open(encoding="utf-8") as f:
        return [RequestRecord(**json.loads(line)) for line in f if line.strip()]
