"""The results file and its journal: where a batch stands, kept so that a rerun resumes it.

- The results file (``--out``, JSONL) gets one line per input line once its outcome is known:
  ``{"line": N, "request_id": ..., "status": ...}`` plus the outcome's fields. Statuses are the
  queue's (OK, EXPIRED, EVICTED, FAILED, REJECTED) and the batch's own: BAD_LINE (the line is not a
  request), INVALID (inferq refused it: ``problems``), NOT_ENTITLED (403), NO_OUTCOME (none arrived
  by its deadline and a grace period).
- The journal (``<out>.sent``, JSONL) gets a line per request inferq accepted, before its outcome:
  ``{"line": N, "request_id": ..., "expire_at_ms": ..., "at_ms": ...}``; its first line names the
  batch.

Both are appended and flushed line by line, the journal synced too (a SIGKILL loses at most a line
being written; a torn last line is cut off when the file is opened again). A rerun skips every line
with an outcome, waits for the accepted ones without sending them again, and sends the rest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from inferq.clock import wall_ms


class LedgerError(Exception):
    """The results file belongs to another batch, or cannot be read."""


@dataclass(frozen=True)
class Accepted:
    line: int
    request_id: str
    expire_at_ms: int
    # When it was accepted (epoch ms): a resumed Kafka batch follows the reply topic from there.
    at_ms: int | None = None


@dataclass
class BatchState:
    """What the two files say: outcomes by line, accepted requests still waiting for one."""

    outcomes: dict[int, str] = field(default_factory=dict)
    accepted: dict[int, Accepted] = field(default_factory=dict)
    batch: str | None = None

    @property
    def waiting(self) -> dict[int, Accepted]:
        return {n: a for n, a in self.accepted.items() if n not in self.outcomes}

    def waiting_since_ms(self) -> int | None:
        """When the oldest request still waiting for its outcome was accepted (None: none waits)."""
        times = [a.at_ms if a.at_ms is not None else 0 for a in self.waiting.values()]
        return min(times) if times else None

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for status in self.outcomes.values():
            counts[status] = counts.get(status, 0) + 1
        return dict(sorted(counts.items()))


def journal_path(out: Path) -> Path:
    return out.with_name(out.name + ".sent")


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline: a write the process did not finish."""
    if not path.exists():
        return
    with path.open("rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise LedgerError(f"{path}:{number}: not a line this command wrote") from exc
            if isinstance(record, dict):
                records.append(record)
    return records


def read_state(out: Path) -> BatchState:
    """The state of the batch whose results file is `out` (no file yet: nothing done)."""
    state = BatchState()
    for record in _records(journal_path(out)):
        if "batch" in record:
            state.batch = str(record["batch"])
        elif isinstance(record.get("line"), int):
            line = record["line"]
            at_ms = record.get("at_ms")
            state.accepted[line] = Accepted(
                line,
                str(record["request_id"]),
                int(record["expire_at_ms"]),
                at_ms if isinstance(at_ms, int) else None,
            )
    for record in _records(out):
        if isinstance(record.get("line"), int) and isinstance(record.get("status"), str):
            state.outcomes.setdefault(record["line"], record["status"])
    return state


class Ledger:
    """Appends outcomes and acceptances for one batch; each line written at most once per process."""

    def __init__(self, out: Path, batch: str) -> None:
        self.out = out
        _cut_torn_tail(out)
        _cut_torn_tail(journal_path(out))
        self.state = read_state(out)
        if self.state.batch is not None and self.state.batch != batch:
            raise LedgerError(
                f"{out} holds batch {self.state.batch}, not {batch} (the file or --batch-id changed): "
                "give another --out, or the same file and batch id as before"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        self._results: IO[str] = out.open("a", encoding="utf-8")
        self._journal: IO[str] = journal_path(out).open("a", encoding="utf-8")
        if self.state.batch is None:
            self._append(self._journal, {"batch": batch})
            self.state.batch = batch

    @staticmethod
    def _append(f: IO[str], record: dict[str, Any], *, sync: bool = False) -> None:
        f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        # Flushed: a killed process loses nothing written. The journal is also synced, so even a
        # machine crash cannot forget an acceptance (and resend); a lost outcome is only waited for again.
        f.flush()
        if sync:
            os.fsync(f.fileno())

    def accepted(self, line: int, request_id: str, expire_at_ms: int) -> None:
        if line in self.state.accepted:
            return
        at_ms = wall_ms()
        self.state.accepted[line] = Accepted(line, request_id, expire_at_ms, at_ms)
        record = {"line": line, "request_id": request_id, "expire_at_ms": expire_at_ms, "at_ms": at_ms}
        self._append(self._journal, record, sync=True)

    def outcome(self, line: int, request_id: str, status: str, **fields: Any) -> bool:
        """Record line's outcome; False (and nothing written) if it already has one."""
        if line in self.state.outcomes:
            return False
        self.state.outcomes[line] = status
        self._append(self._results, {"line": line, "request_id": request_id, "status": status} | fields)
        return True

    def close(self) -> None:
        self._results.close()
        self._journal.close()
