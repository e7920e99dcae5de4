"""The results table: SQLite in WAL mode, first terminal result per (tenant, request_id) wins.
Synchronous.

At-least-once delivery means a result can arrive twice (a dispatcher crashed after producing and
before committing); the primary key keeps the first and the duplicate is counted, so every caller
sees exactly one outcome. A request id is unique per tenant only: two tenants' requests with the
same id are two rows, and neither can read or shadow the other's.

A database written before tenants (its key: request_id alone) is migrated when opened: its rows
are copied, in one transaction, into the new table under tenant ``default`` (what every request
was before a tenants file existed). One written before results carried `finish_reason`,
`system_fingerprint`, `tool_calls`, `choices` (JSON, as usage) and `embeddings` gains those
columns, NULL in its rows. An embedding result's vectors are one BLOB: their count and width, then
the 32-bit floats, little-endian (what the result record carries, a quarter of their JSON).

The table is bounded two ways: by age (`purge` deletes results stored before a cut-off, and `get`
does not serve them even before the purge ran) and by count (`max_rows`: past it, the results
stored first are deleted first, after every batch). Age counts from `stored_at_ms`, this service's
own clock, not a time the record carries: a record cannot make itself immortal.

Beside the results, `reply_positions` holds how far each reply partition was read (the offset of
the next record), written in the same transaction as the batch read up to there: a replica
restarted resumes exactly after what it stored, with no consumer group and no Kafka commit.

A `ResultsTable` is one sqlite3 connection, which belongs to the thread that opened it (sqlite3
refuses it anywhere else) and blocks while it works: the service reaches it only through
`inferq.results.store.ResultStore`, whose worker thread owns it.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from inferq.clock import wall_ms
from inferq.messaging.records import InferenceResult
from inferq.messaging.reply_positions import ReplyPartition, ReplySource

_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    tenant TEXT NOT NULL DEFAULT 'default',
    request_id TEXT NOT NULL,
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
    dispatcher_id TEXT NOT NULL,
    finish_reason TEXT,
    system_fingerprint TEXT,
    tool_calls TEXT,
    choices TEXT,
    embeddings BLOB,
    stored_at_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, request_id)
)
"""
_SCHEMA = _TABLE.format(name="results")
_INDEX = "CREATE INDEX IF NOT EXISTS results_stored_at ON results (stored_at_ms)"
_COLUMNS = (
    "tenant",
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
    "finish_reason",
    "system_fingerprint",
    "tool_calls",
    "choices",
    "embeddings",
    "stored_at_ms",
)
_INSERT = (
    f"INSERT OR IGNORE INTO results ({', '.join(_COLUMNS)}) "  # noqa: S608 - constant column names
    f"VALUES ({', '.join('?' for _ in _COLUMNS)})"
)
_RECORD_COLUMNS = _COLUMNS[:-1]
_POSITIONS = """
CREATE TABLE IF NOT EXISTS reply_positions (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
)
"""
_SAVE_POSITION = (
    "INSERT INTO reply_positions (topic, partition, next_offset) VALUES (?, ?, ?) "
    "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = MAX(next_offset, excluded.next_offset)"
)


class StoredHook(Protocol):
    """Something kept beside the results in the same database, written in the same transaction as
    each newly stored result (the webhook outbox: `inferq.webhooks.outbox`)."""

    def prepare(self, db: sqlite3.Connection) -> None:
        """Create what it needs (once the results table exists)."""

    def stored(
        self,
        db: sqlite3.Connection,
        result: InferenceResult,
        stored_at_ms: int,
        source: ReplySource | None,
    ) -> None:
        """`result` was just stored (not a duplicate), inside the still open transaction; `source`
        is the record it was read from (None when the caller did not say)."""


class ResultsTable:
    """One connection to the results database, created (with its directory) if missing.

    `max_rows` (None: unbounded) caps how many results are kept; `clock_ms` stamps each stored row;
    `hooks` are told of each stored result inside its transaction. Use it from the thread that
    built it, and close it there.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_rows: int | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        hooks: Sequence[StoredHook] = (),
    ) -> None:
        if max_rows is not None and max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._max_rows = max_rows
        self._clock_ms = clock_ms
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        # WAL: a reader (another process: a report, a test's ledger) never blocks the writer; NORMAL
        # is durable across a process crash, and the Kafka offset is committed only after the write,
        # so nothing is lost either way.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        self._add_stored_at()
        self._add_answer_facts()
        self._key_by_tenant()
        self._db.execute(_INDEX)
        self._db.execute(_POSITIONS)
        self._hooks = tuple(hooks)
        for hook in self._hooks:
            hook.prepare(self._db)
        # Kept up to date by every write, so the size bound and /healthz never scan the table.
        self._rows = self._count_rows()

    def _add_stored_at(self) -> None:
        # A database written before retention existed: its rows count as stored when they completed.
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(results)")}
        if "stored_at_ms" not in columns:
            with self._db:
                self._db.execute("BEGIN")
                self._db.execute("ALTER TABLE results ADD COLUMN stored_at_ms INTEGER NOT NULL DEFAULT 0")
                self._db.execute("UPDATE results SET stored_at_ms = completed_at_ms")

    def _add_answer_facts(self) -> None:
        # A database written before results carried them: its rows have none (NULL).
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(results)")}
        with self._db:
            self._db.execute("BEGIN")
            for column in ("finish_reason", "system_fingerprint", "tool_calls", "choices"):
                if column not in columns:
                    self._db.execute(f"ALTER TABLE results ADD COLUMN {column} TEXT")
            if "embeddings" not in columns:
                self._db.execute("ALTER TABLE results ADD COLUMN embeddings BLOB")

    def _key_by_tenant(self) -> None:
        # A database written before tenants: SQLite cannot change a primary key in place, so the
        # rows move to a table keyed (tenant, request_id), all under "default", in one transaction.
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(results)")}
        if "tenant" in columns:
            return
        kept = ", ".join(c for c in _COLUMNS if c != "tenant")
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute(_TABLE.format(name="results_by_tenant"))
            self._db.execute(
                f"INSERT INTO results_by_tenant (tenant, {kept}) "  # noqa: S608 - constant column names
                f"SELECT 'default', {kept} FROM results"
            )
            self._db.execute("DROP TABLE results")
            self._db.execute("ALTER TABLE results_by_tenant RENAME TO results")

    def close(self) -> None:
        self._db.close()

    @property
    def connection(self) -> sqlite3.Connection:
        """The connection, for what lives beside the results (`hooks`): same thread rules."""
        return self._db

    def put_many(
        self,
        results: Iterable[InferenceResult],
        *,
        sources: Sequence[ReplySource] | None = None,
        positions: Mapping[ReplyPartition, int] | None = None,
    ) -> tuple[int, int]:
        """Store results in one transaction; returns (stored, duplicates dropped). Past `max_rows`,
        the oldest results are deleted in the same transaction. `sources` (one per result, in
        order) says which record each came from; `positions` (the next offset to read, per
        partition) is saved in the same transaction, never moving back."""
        batch = tuple(results)
        if sources is not None and len(sources) != len(batch):
            raise ValueError(f"{len(sources)} sources for {len(batch)} results")
        stored = duplicates = 0
        stored_at_ms = self._clock_ms()
        with self._recounted_on_error(), self._db:
            self._db.execute("BEGIN")
            for index, result in enumerate(batch):
                record = result.to_record()
                row = [record[c] for c in _RECORD_COLUMNS] + [stored_at_ms]
                row[_COLUMNS.index("usage")] = json.dumps(record["usage"]) if record["usage"] else None
                choices = record["choices"]
                row[_COLUMNS.index("choices")] = None if choices is None else json.dumps(choices)
                row[_COLUMNS.index("embeddings")] = packed_vectors(result.embeddings)
                cursor = self._db.execute(_INSERT, row)
                if cursor.rowcount == 1:
                    stored += 1
                    source = sources[index] if sources is not None else None
                    for hook in self._hooks:
                        hook.stored(self._db, result, stored_at_ms, source)
                else:
                    duplicates += 1
            for where, next_offset in (positions or {}).items():
                self._db.execute(_SAVE_POSITION, (where.topic, where.partition, next_offset))
            self._rows += stored
            self._evict_oldest()
        return stored, duplicates

    def positions(self) -> dict[ReplyPartition, int]:
        """How far each reply partition was read: the offset of the next record to store."""
        return stored_positions(self._db)

    def get(
        self, tenant: str, request_id: str, *, stored_since_ms: int | None = None
    ) -> InferenceResult | None:
        """`tenant`'s result for `request_id`; None when there is none, or it was stored before
        `stored_since_ms` (expired, even if not purged yet)."""
        row = self._db.execute(
            "SELECT * FROM results WHERE tenant = ? AND request_id = ? AND stored_at_ms >= ?",
            (tenant, request_id, stored_since_ms if stored_since_ms is not None else -(2**63)),
        ).fetchone()
        if row is None:
            return None
        record = {c: row[c] for c in _RECORD_COLUMNS}
        record["usage"] = json.loads(record["usage"]) if record["usage"] else None
        record["choices"] = json.loads(record["choices"]) if record["choices"] else None
        record["embeddings"] = unpacked_vectors(record["embeddings"])
        return InferenceResult.from_record(record)

    def purge(self, *, stored_before_ms: int) -> tuple[int, int]:
        """Delete results stored before `stored_before_ms`, then the oldest past `max_rows`;
        returns (expired, evicted)."""
        with self._recounted_on_error(), self._db:
            self._db.execute("BEGIN")
            expired = self._db.execute(
                "DELETE FROM results WHERE stored_at_ms < ?", (stored_before_ms,)
            ).rowcount
            self._rows -= expired
            evicted = self._evict_oldest()
        return expired, evicted

    def count(self) -> int:
        """How many results the table holds (expired ones included until they are purged)."""
        return self._rows

    @contextlib.contextmanager
    def _recounted_on_error(self) -> Iterator[None]:
        # A transaction rolled back undoes the writes the running count already took in.
        try:
            yield
        except BaseException:
            self._rows = self._count_rows()
            raise

    def _count_rows(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def _evict_oldest(self) -> int:
        excess = self._rows - self._max_rows if self._max_rows is not None else 0
        if excess <= 0:
            return 0
        evicted = self._db.execute(
            "DELETE FROM results WHERE rowid IN "
            "(SELECT rowid FROM results ORDER BY stored_at_ms, rowid LIMIT ?)",
            (excess,),
        ).rowcount
        self._rows -= evicted
        return evicted


_SHAPE = struct.Struct("<II")


def packed_vectors(vectors: Sequence[Sequence[float]] | None) -> bytes | None:
    """Vectors as the table keeps them: their count and width, then their 32-bit floats."""
    if vectors is None:
        return None
    width = len(vectors[0]) if vectors else 0
    values = [value for vector in vectors for value in vector]
    return _SHAPE.pack(len(vectors), width) + struct.pack(f"<{len(values)}f", *values)


def unpacked_vectors(blob: bytes | None) -> list[list[float]] | None:
    """`packed_vectors`' vectors back (None for a row with none)."""
    if blob is None:
        return None
    count, width = _SHAPE.unpack_from(blob)
    values = struct.unpack_from(f"<{count * width}f", blob, _SHAPE.size)
    return [list(values[i * width : (i + 1) * width]) for i in range(count)]


def stored_positions(db: sqlite3.Connection) -> dict[ReplyPartition, int]:
    """How far each reply partition was stored (the next offset), read on `db` (the store's worker)."""
    rows = db.execute("SELECT topic, partition, next_offset FROM reply_positions")
    return {ReplyPartition(topic, partition): next_offset for topic, partition, next_offset in rows}
