"""The result store's async API: every SQLite call runs on one worker thread, never on the event loop.

sqlite3 calls block, and a connection belongs to the thread that opened it. So `ResultStore` owns a
one-thread executor; that thread opens the `ResultsTable`, runs every call on it and closes it. The
event loop only awaits: the consumer's batch write no longer stalls HTTP, and an HTTP read no
longer stalls consumption.

Calls run one at a time, in the order they were made: a `get` made while `put_many` runs waits for
it and sees the whole batch (a batch is one transaction), never part of it. A GET waits for at most
the batch in progress (the consumer writes at most 1,000 results at a time).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from inferq.clock import wall_ms
from inferq.messaging.records import InferenceResult
from inferq.messaging.reply_positions import ReplyPartition, ReplySource
from inferq.results.errors import StoreNotOpenError
from inferq.results.table import ResultsTable, StoredHook

_T = TypeVar("_T")
WORKER_THREAD_NAME = "results-sqlite"


class ResultStore:
    """First result per (tenant, request_id), in SQLite at `path` (WAL), behind coroutines.

    `hooks` (`table.StoredHook`) write beside each newly stored result, in its transaction.
    A result is served for `retention_s` after it was stored (None: forever) and deleted by the next
    `purge()`; at most `max_results` are kept, the oldest stored deleted first (None: unbounded).

    `open()` and `close()` are idempotent; `close()` lets every call already made finish first, then
    closes the connection and ends the worker thread. A call before `open()` or after `close()`
    raises `StoreNotOpenError`. Also an async context manager.
    """

    def __init__(
        self,
        path: Path,
        *,
        retention_s: float | None = None,
        max_results: int | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        hooks: Sequence[StoredHook] = (),
    ) -> None:
        self._path = path
        self._hooks = tuple(hooks)
        self._retention_ms = None if retention_s is None else int(retention_s * 1000)
        self._max_results = max_results
        self._clock_ms = clock_ms
        self._executor: ThreadPoolExecutor | None = None
        # Touched only on the worker thread: created, used and closed there.
        self._table: ResultsTable | None = None
        self._closing: asyncio.Future[None] | None = None

    @property
    def path(self) -> Path:
        return self._path

    async def open(self) -> None:
        if self._executor is not None:
            return
        if self._closing is not None:
            raise StoreNotOpenError(str(self._path))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=WORKER_THREAD_NAME)
        try:
            await self._on_worker(self._open_table)
        except BaseException as exc:
            executor, self._executor = self._executor, None
            if executor is not None:  # else a concurrent close() already took the worker down
                # A cancelled open may still be running on the worker: what it opens is closed after it.
                executor.submit(self._close_table)
                # After a failed open the worker has nothing left to do, so its thread ends at once;
                # a cancelled open is not waited for.
                executor.shutdown(wait=not isinstance(exc, asyncio.CancelledError))
            raise

    async def close(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        # A second caller waits for the first close rather than returning before it is done.
        await asyncio.shield(self._closing)

    async def put_many(
        self,
        results: Iterable[InferenceResult],
        *,
        sources: Sequence[ReplySource] | None = None,
        positions: Mapping[ReplyPartition, int] | None = None,
    ) -> tuple[int, int]:
        """Store results in one transaction; returns (stored, duplicates dropped). `sources` and
        `positions`: see `ResultsTable.put_many` (the records read, how far each partition was read)."""
        # Materialised here: the caller's iterables are not to be walked from another thread.
        batch = tuple(results)
        froms = tuple(sources) if sources is not None else None
        upto = dict(positions) if positions is not None else None
        return await self._on_table(lambda table: table.put_many(batch, sources=froms, positions=upto))

    async def positions(self) -> dict[ReplyPartition, int]:
        """How far each reply partition was read and stored (the next offset): where to resume."""
        return await self._on_table(ResultsTable.positions)

    async def get(self, tenant: str, request_id: str) -> InferenceResult | None:
        """The first result stored for `tenant`'s `request_id`, or None (also when it is past
        retention, and for another tenant's id)."""
        since_ms = self._retained_since_ms()
        return await self._on_table(lambda table: table.get(tenant, request_id, stored_since_ms=since_ms))

    async def on_connection(self, call: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `call` with the database's connection on the worker thread, in turn with every other
        call (what lives beside the results: the webhook outbox)."""
        return await self._on_table(lambda table: call(table.connection))

    async def count(self) -> int:
        """How many requests have a result (expired ones until they are purged)."""
        return await self._on_table(ResultsTable.count)

    async def purge(self) -> tuple[int, int]:
        """Delete the results past retention, then the oldest past `max_results`; returns
        (expired, evicted)."""
        since_ms = self._retained_since_ms()
        cut_off_ms = since_ms if since_ms is not None else -(2**63)
        return await self._on_table(lambda table: table.purge(stored_before_ms=cut_off_ms))

    def _retained_since_ms(self) -> int | None:
        return None if self._retention_ms is None else self._clock_ms() - self._retention_ms

    async def __aenter__(self) -> ResultStore:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _on_table(self, call: Callable[[ResultsTable], _T]) -> _T:
        if self._closing is not None:
            raise StoreNotOpenError(str(self._path))

        def on_worker() -> _T:
            # Read on the worker: calls queue behind `open`, so the table exists by the time they run.
            table = self._table
            if table is None:
                raise StoreNotOpenError(str(self._path))
            return call(table)

        return await self._on_worker(on_worker)

    async def _on_worker(self, call: Callable[[], _T]) -> _T:
        if self._executor is None:
            raise StoreNotOpenError(str(self._path))
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def _close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            # Queued behind every call already made, so they all finish on an open connection.
            await asyncio.get_running_loop().run_in_executor(executor, self._close_table)
        finally:
            # The worker is idle by now: this only lets its thread end.
            executor.shutdown(wait=True)

    def _open_table(self) -> None:
        self._table = ResultsTable(
            self._path, max_rows=self._max_results, clock_ms=self._clock_ms, hooks=self._hooks
        )

    def _close_table(self) -> None:
        table, self._table = self._table, None
        if table is not None:
            table.close()
