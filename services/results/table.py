"""The results table: SQLite in WAL mode, first terminal result per request_id wins. Synchronous.

At-least-once delivery means a result can arrive twice (a dispatcher crashed after producing and
before committing); the primary key keeps the first and the duplicate is counted, so every caller
sees exactly one outcome.

A `ResultsTable` is one sqlite3 connection, which belongs to the thread that opened it (sqlite3
refuses it anywhere else) and blocks while it works: the service reaches it only through
`services.results.store.ResultStore`, whose worker thread owns it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from services.messaging.records import InferenceResult

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    request_id TEXT PRIMARY KEY,
    tier TEXT NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    error TEXT,
    model TEXT NOT NULL,
    usage TEXT,
    enqueued_at_ms INTEGER NOT NULL,
    dispatched_at_ms INTEGER,
    completed_at_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    dispatcher_id TEXT NOT NULL
)
"""
_COLUMNS = (
    "request_id",
    "tier",
    "status",
    "output",
    "error",
    "model",
    "usage",
    "enqueued_at_ms",
    "dispatched_at_ms",
    "completed_at_ms",
    "attempts",
    "dispatcher_id",
)
_INSERT = (
    f"INSERT OR IGNORE INTO results ({', '.join(_COLUMNS)}) "  # noqa: S608 - constant column names
    f"VALUES ({', '.join('?' for _ in _COLUMNS)})"
)


class ResultsTable:
    """One connection to the results database, created (with its directory) if missing.

    Use it from the thread that built it, and close it there.
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        # WAL: a reader (another process: a report, a test's ledger) never blocks the writer; NORMAL
        # is durable across a process crash, and the Kafka offset is committed only after the write,
        # so nothing is lost either way.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def put_many(self, results: Iterable[InferenceResult]) -> tuple[int, int]:
        """Store results in one transaction; returns (stored, duplicates dropped)."""
        stored = duplicates = 0
        with self._db:
            self._db.execute("BEGIN")
            for result in results:
                record = result.to_record()
                row = [record[c] for c in _COLUMNS]
                row[_COLUMNS.index("usage")] = json.dumps(record["usage"]) if record["usage"] else None
                cursor = self._db.execute(_INSERT, row)
                if cursor.rowcount == 1:
                    stored += 1
                else:
                    duplicates += 1
        return stored, duplicates

    def get(self, request_id: str) -> InferenceResult | None:
        row = self._db.execute("SELECT * FROM results WHERE request_id = ?", (request_id,)).fetchone()
        if row is None:
            return None
        record = dict(row)
        record["usage"] = json.loads(record["usage"]) if record["usage"] else None
        return InferenceResult.from_record(record)

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
