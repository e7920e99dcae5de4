"""The webhook outbox: one row per delivery owed, in the results database, written in the same
SQLite transaction as the result it delivers.

So a result is never stored without its delivery, nor a delivery queued for a result that was
not stored (a duplicate result adds no second delivery), and a restart of the results service
loses nothing: the sender reads the rows back and goes on. A row holds what every attempt sends
(the body, frozen when the result was stored, and the delivery id, the same on every retry), when
the next attempt is due and how many were made; it is deleted once the delivery is over
(delivered, 410 Gone, or dead-lettered).

`WebhookOutbox` is synchronous and runs on the result store's worker thread: `prepare` and
`stored` are the results table's hook (`inferq.results.table.StoredHook`), the other methods
are called through `ResultStore.on_connection`.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass

from inferq.messaging.records import InferenceResult

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
_INDEX = "CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox (next_attempt_at_ms)"
_COLUMNS = "delivery_id, tenant, request_id, callback_url, body, stored_at_ms, attempts, last_error"


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


def _new_id() -> str:
    return str(uuid.uuid4())


class WebhookOutbox:
    """`body_of` turns a result into the bytes POSTed (the results service's public view as JSON);
    `on_enqueued` is called (on the worker thread) when a row is added: the sender's wake-up."""

    def __init__(
        self, body_of: Callable[[InferenceResult], bytes], *, new_id: Callable[[], str] = _new_id
    ) -> None:
        self._body_of = body_of
        self._new_id = new_id
        self.on_enqueued: Callable[[], None] = lambda: None

    # --- the results table's hook ------------------------------------------------------------------

    def prepare(self, db: sqlite3.Connection) -> None:
        db.execute(_SCHEMA)
        db.execute(_INDEX)

    def stored(self, db: sqlite3.Connection, result: InferenceResult, stored_at_ms: int) -> None:
        """Inside the transaction that stored `result` (first of its request): queue its delivery."""
        if result.callback_url is None:
            return
        db.execute(
            "INSERT INTO webhook_outbox (delivery_id, tenant, request_id, callback_url, body, "
            "stored_at_ms, next_attempt_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                self._new_id(),
                result.tenant,
                result.request_id,
                result.callback_url,
                self._body_of(result),
                stored_at_ms,
                stored_at_ms,
            ),
        )
        self.on_enqueued()

    # --- the sender's side -------------------------------------------------------------------------

    def due(
        self, db: sqlite3.Connection, *, now_ms: int, limit: int, exclude: Collection[str] = ()
    ) -> list[PendingDelivery]:
        """At most `limit` deliveries due at `now_ms`, the longest due first, leaving out `exclude`
        (those in flight)."""
        rows = db.execute(
            f"SELECT {_COLUMNS} FROM webhook_outbox WHERE next_attempt_at_ms <= ? "  # noqa: S608 - constant columns
            "ORDER BY next_attempt_at_ms LIMIT ?",
            (now_ms, limit + len(exclude)),
        ).fetchall()
        found = [PendingDelivery(*tuple(row)) for row in rows if row[0] not in exclude]
        return found[:limit]

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

    def pending(self, db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT COUNT(*) FROM webhook_outbox").fetchone()[0])

    def get(self, db: sqlite3.Connection, delivery_id: str) -> PendingDelivery | None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM webhook_outbox WHERE delivery_id = ?",  # noqa: S608 - constant columns
            (delivery_id,),
        ).fetchone()
        return None if row is None else PendingDelivery(*tuple(row))
