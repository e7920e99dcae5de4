"""The webhook outbox: one row per delivery owed, in the results database, written in the same
SQLite transaction as the result it delivers.

So a result is never stored without its delivery, nor a delivery queued for a result that was
not stored (a duplicate result adds no second delivery), and a restart of the results service
loses nothing: the sender reads the rows back and goes on. A row holds what every attempt sends
(the body, frozen when the result was stored, and the delivery id, the same on every retry), when
the next attempt is due and how many were made; it is deleted once the delivery is over
(delivered, 410 Gone, or dead-lettered).

Every results replica holds every result, so every replica writes the same rows; the replica that
owns a reply partition (`inferq.results.ownership`) sends that partition's rows. So that a successor
can tell what its predecessor finished, a row remembers its source record (topic, partition,
offset), and `webhook_done_below` holds, per partition, the offset below which every delivery is
over (the owner's committed watermark): rows below it are deleted, and a result read later from
below it queues nothing. The delivery id is derived from the result (tenant, request id, the
dispatcher and time that completed it), so every replica's row for one result carries the same id,
and a delivery sent again by a successor is one receivers deduplicate. A row without a source
(written before replicas, or by a caller that did not say) is sent by whichever replica holds it.

A tenant's deliveries owed are bounded by its `webhooks_queued` (`queue_limit`): a result stored
past it is stored all the same (GET reads it), but its row is queued as `refused`, with the
reason, and the sender dead-letters it instead of sending it (nothing is lost, and it is written in
the same transaction as the result, like any row). Refused rows do not count towards the bound.
With replicas each replica decides from its own rows, which may lag the owner's by what the owner
delivered since its last watermark: only the owner's decision is acted on (it alone sends or
dead-letters the row), unless the partition moves in between.

The sender reads due rows per tenant (`tenants_from`, `due_of`: an index on (tenant,
next_attempt_at_ms) of the rows not refused, so a pass reads a few rows per tenant, never the whole
table) and shares its slots among tenants (`inferq.webhooks.fair_share`).

`WebhookOutbox` is synchronous and runs on the result store's worker thread: `prepare` and
`stored` are the results table's hook (`inferq.results.table.StoredHook`), the other methods
are called through `ResultStore.on_connection`.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inferq.messaging.records import InferenceResult
from inferq.messaging.reply_positions import ReplyPartition, ReplySource

_SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_outbox (
    delivery_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    callback_url TEXT NOT NULL,
    body BLOB NOT NULL,
    stored_at_ms INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
)
"""
# Added for replicas (a database from before gets them, NULL in its rows: sent by their holder),
# then `refused` for the queue bound (NULL: a delivery to send; else why it is dead-lettered).
_ADDED_COLUMNS = {"topic": "TEXT", "partition": "INTEGER", "source_offset": "INTEGER", "refused": "TEXT"}
_INDEX = "CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox (next_attempt_at_ms)"
# The sender's per-tenant reads and the queue bound's count: rows to send only.
_TENANT_INDEX = (
    "CREATE INDEX IF NOT EXISTS webhook_outbox_tenant_due ON webhook_outbox (tenant, next_attempt_at_ms) "
    "WHERE refused IS NULL"
)
_REFUSED_INDEX = (
    "CREATE INDEX IF NOT EXISTS webhook_outbox_refused ON webhook_outbox (stored_at_ms) "
    "WHERE refused IS NOT NULL"
)
_SOURCE_INDEX = (
    "CREATE INDEX IF NOT EXISTS webhook_outbox_source ON webhook_outbox (topic, partition, source_offset)"
)
_DONE = """
CREATE TABLE IF NOT EXISTS webhook_done_below (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
)
"""
_COLUMNS = (
    "delivery_id, tenant, request_id, callback_url, body, stored_at_ms, attempts, last_error, "
    "topic, partition, source_offset, refused"
)
# The namespace of derived delivery ids (a constant: every replica derives the same id).
_DELIVERY_NAMESPACE = uuid.UUID("0b6c3f2e-5d0e-4c55-9a57-1f4e3c1a7d21")


@dataclass(frozen=True)
class PendingDelivery:
    """One delivery owed: `attempts` made so far, the `last_error` of the latest."""

    delivery_id: str
    tenant: str
    request_id: str
    callback_url: str
    body: bytes
    stored_at_ms: int
    attempts: int = 0
    last_error: str | None = None
    # The record its result came from; None for a row from before replicas.
    source: ReplySource | None = None
    # Why it is dead-lettered instead of sent (its tenant's queue was full); None: to be sent.
    refused: str | None = None


def delivery_id_of(result: InferenceResult) -> str:
    """The same id on every replica for the same stored result; another result for a request id
    used again later (another completion) gets another."""
    name = "\n".join((result.tenant, result.request_id, result.dispatcher_id, str(result.completed_at_ms)))
    return str(uuid.uuid5(_DELIVERY_NAMESPACE, name))


def _pending(row: Sequence[Any]) -> PendingDelivery:
    """A row of `_COLUMNS` as the sender sees it."""
    delivery_id, tenant, request_id, url, body, stored_at_ms, attempts, last_error, *where = tuple(row)
    topic, partition, offset, refused = where
    source = None if topic is None else ReplySource(topic, partition, offset)
    return PendingDelivery(
        delivery_id, tenant, request_id, url, body, stored_at_ms, attempts, last_error, source, refused
    )


def queue_full_reason(tenant: str, limit: int) -> str:
    """The dead letter's reason for a delivery past its tenant's `webhooks_queued`."""
    return f"webhook queue of tenant {tenant} is full (webhooks_queued={limit})"


def _owned_clause(owned: Collection[ReplyPartition] | None) -> tuple[str, list[object]]:
    """SQL (and its parameters) keeping the rows `owned` covers: all with None, else the rows of
    those partitions and the rows without a source."""
    if owned is None:
        return "1", []
    if not owned:
        return "topic IS NULL", []
    values = ", ".join("(?, ?)" for _ in owned)
    params: list[object] = [v for where in owned for v in (where.topic, where.partition)]
    return f"(topic IS NULL OR (topic, partition) IN (VALUES {values}))", params


class WebhookOutbox:
    """`body_of` turns a result into the bytes POSTed (the results service's public view as JSON);
    `queue_limit` is a tenant's `webhooks_queued` (called on the worker thread; None: unbounded);
    `on_enqueued` is called (on the worker thread) when a row is added: the sender's wake-up."""

    def __init__(
        self,
        body_of: Callable[[InferenceResult], bytes],
        *,
        new_id: Callable[[InferenceResult], str] = delivery_id_of,
        queue_limit: Callable[[str], int] | None = None,
    ) -> None:
        self._body_of = body_of
        self._new_id = new_id
        self._queue_limit = queue_limit
        self.on_enqueued: Callable[[], None] = lambda: None

    # --- the results table's hook ------------------------------------------------------------------

    def prepare(self, db: sqlite3.Connection) -> None:
        db.execute(_SCHEMA)
        columns = {row[1] for row in db.execute("PRAGMA table_info(webhook_outbox)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in columns:
                db.execute(f"ALTER TABLE webhook_outbox ADD COLUMN {name} {kind}")
        db.execute(_INDEX)
        db.execute(_SOURCE_INDEX)
        db.execute(_TENANT_INDEX)
        db.execute(_REFUSED_INDEX)
        db.execute(_DONE)

    def stored(
        self,
        db: sqlite3.Connection,
        result: InferenceResult,
        stored_at_ms: int,
        source: ReplySource | None = None,
    ) -> None:
        """Inside the transaction that stored `result` (first of its request): queue its delivery,
        unless its record lies below its partition's done watermark (its owner finished it); past
        its tenant's `queue_limit`, queued as refused (to be dead-lettered)."""
        if result.callback_url is None:
            return
        if source is not None and source.offset < self._done_below(db, source.where):
            return
        refused = None
        if self._queue_limit is not None:
            limit = self._queue_limit(result.tenant)
            if self.queued(db, result.tenant, up_to=limit) >= limit:
                refused = queue_full_reason(result.tenant, limit)
        db.execute(
            "INSERT OR IGNORE INTO webhook_outbox (delivery_id, tenant, request_id, callback_url, body, "
            "stored_at_ms, next_attempt_at_ms, topic, partition, source_offset, refused) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                self._new_id(result),
                result.tenant,
                result.request_id,
                result.callback_url,
                self._body_of(result),
                stored_at_ms,
                stored_at_ms,
                source.topic if source is not None else None,
                source.partition if source is not None else None,
                source.offset if source is not None else None,
                refused,
            ),
        )
        self.on_enqueued()

    def queued(self, db: sqlite3.Connection, tenant: str, *, up_to: int) -> int:
        """The tenant's deliveries owed (not refused), counted up to `up_to` (the index, no more)."""
        row = db.execute(
            "SELECT COUNT(*) FROM "
            "(SELECT 1 FROM webhook_outbox WHERE refused IS NULL AND tenant = ? LIMIT ?)",
            (tenant, up_to),
        ).fetchone()
        return int(row[0])

    # --- which replica sends, and what is done ---------------------------------------------------------

    def _done_below(self, db: sqlite3.Connection, where: ReplyPartition) -> int:
        row = db.execute(
            "SELECT next_offset FROM webhook_done_below WHERE topic = ? AND partition = ?",
            (where.topic, where.partition),
        ).fetchone()
        return -1 if row is None else int(row[0])

    def mark_done_below(self, db: sqlite3.Connection, marks: Mapping[ReplyPartition, int]) -> int:
        """Every delivery of a record below `marks[partition]` is over (its owner committed so):
        remember it (never moving back) and delete those rows; returns how many were deleted."""
        deleted = 0
        with db:
            db.execute("BEGIN")
            for where, next_offset in marks.items():
                db.execute(
                    "INSERT INTO webhook_done_below (topic, partition, next_offset) VALUES (?, ?, ?) "
                    "ON CONFLICT (topic, partition) DO UPDATE "
                    "SET next_offset = MAX(next_offset, excluded.next_offset)",
                    (where.topic, where.partition, next_offset),
                )
                deleted += db.execute(
                    "DELETE FROM webhook_outbox WHERE topic = ? AND partition = ? AND source_offset < ?",
                    (where.topic, where.partition, next_offset),
                ).rowcount
        return deleted

    def first_pending(
        self, db: sqlite3.Connection, partitions: Iterable[ReplyPartition]
    ) -> dict[ReplyPartition, int]:
        """Per partition with rows, the lowest source offset still owed (the owner's watermark
        cannot pass it)."""
        found: dict[ReplyPartition, int] = {}
        for where in partitions:
            row = db.execute(
                "SELECT MIN(source_offset) FROM webhook_outbox WHERE topic = ? AND partition = ?",
                (where.topic, where.partition),
            ).fetchone()
            if row is not None and row[0] is not None:
                found[where] = int(row[0])
        return found

    # --- the sender's side -------------------------------------------------------------------------

    def due(
        self,
        db: sqlite3.Connection,
        *,
        now_ms: int,
        limit: int,
        exclude: Collection[str] = (),
        owned: Collection[ReplyPartition] | None = None,
    ) -> list[PendingDelivery]:
        """At most `limit` deliveries due at `now_ms`, the longest due first, leaving out `exclude`
        (those in flight); with `owned`, only those of these partitions (and rows without a source)."""
        where, params = _owned_clause(owned)
        rows = db.execute(
            f"SELECT {_COLUMNS} FROM webhook_outbox WHERE next_attempt_at_ms <= ? AND {where} "  # noqa: S608 - constant columns, placeholders
            "ORDER BY next_attempt_at_ms LIMIT ?",
            (now_ms, *params, limit + len(exclude)),
        ).fetchall()
        found = [_pending(row) for row in rows if row[0] not in exclude]
        return found[:limit]

    def tenants_from(self, db: sqlite3.Connection, after: str | None) -> Iterator[str]:
        """Each tenant with deliveries to send, once, in name order from the first after `after`
        round to `after` itself (the sender's round-robin); one index seek per tenant."""
        wrapped = after is None
        name = after
        while True:
            if name is None:
                row = db.execute("SELECT MIN(tenant) FROM webhook_outbox WHERE refused IS NULL").fetchone()
            else:
                row = db.execute(
                    "SELECT MIN(tenant) FROM webhook_outbox WHERE refused IS NULL AND tenant > ?", (name,)
                ).fetchone()
            found: str | None = row[0]
            if found is None:
                if wrapped:
                    return
                wrapped, name = True, None
                continue
            if wrapped and after is not None and found > after:
                return
            yield found
            name = found

    def due_of(
        self,
        db: sqlite3.Connection,
        tenant: str,
        *,
        now_ms: int,
        limit: int,
        exclude: Collection[str] = (),
        owned: Collection[ReplyPartition] | None = None,
    ) -> list[PendingDelivery]:
        """At most `limit` of `tenant`'s deliveries to send due at `now_ms`, the longest due first,
        leaving out `exclude` and, with `owned`, other replicas' rows (see `due`)."""
        where, params = _owned_clause(owned)
        rows = db.execute(
            f"SELECT {_COLUMNS} FROM webhook_outbox WHERE refused IS NULL AND tenant = ? "  # noqa: S608 - constant columns, placeholders
            f"AND next_attempt_at_ms <= ? AND {where} ORDER BY next_attempt_at_ms LIMIT ?",
            (tenant, now_ms, *params, limit + len(exclude)),
        ).fetchall()
        return [_pending(row) for row in rows if row[0] not in exclude][:limit]

    def refused_rows(
        self,
        db: sqlite3.Connection,
        *,
        limit: int,
        exclude: Collection[str] = (),
        owned: Collection[ReplyPartition] | None = None,
    ) -> list[PendingDelivery]:
        """At most `limit` rows queued as refused (to be dead-lettered), the oldest first."""
        where, params = _owned_clause(owned)
        rows = db.execute(
            f"SELECT {_COLUMNS} FROM webhook_outbox WHERE refused IS NOT NULL AND {where} "  # noqa: S608 - constant columns, placeholders
            "ORDER BY stored_at_ms LIMIT ?",
            (*params, limit + len(exclude)),
        ).fetchall()
        return [_pending(row) for row in rows if row[0] not in exclude][:limit]

    def reschedule(
        self, db: sqlite3.Connection, delivery_id: str, *, attempts: int, next_attempt_at_ms: int, error: str
    ) -> None:
        with db:
            db.execute("BEGIN")
            db.execute(
                "UPDATE webhook_outbox SET attempts = ?, next_attempt_at_ms = ?, last_error = ? "
                "WHERE delivery_id = ?",
                (attempts, next_attempt_at_ms, error, delivery_id),
            )

    def remove(self, db: sqlite3.Connection, delivery_id: str) -> None:
        with db:
            db.execute("BEGIN")
            db.execute("DELETE FROM webhook_outbox WHERE delivery_id = ?", (delivery_id,))

    def pending(self, db: sqlite3.Connection, owned: Collection[ReplyPartition] | None = None) -> int:
        """Deliveries owed (with `owned`: by this replica, see `due`)."""
        where, params = _owned_clause(owned)
        query = f"SELECT COUNT(*) FROM webhook_outbox WHERE {where}"  # noqa: S608 - placeholders only
        return int(db.execute(query, params).fetchone()[0])

    def get(self, db: sqlite3.Connection, delivery_id: str) -> PendingDelivery | None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM webhook_outbox WHERE delivery_id = ?",  # noqa: S608 - constant columns
            (delivery_id,),
        ).fetchone()
        return None if row is None else _pending(row)
