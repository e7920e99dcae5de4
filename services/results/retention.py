"""The results store's retention, run in the background: every `interval_s`, expired results are
deleted (and the oldest past the size bound, which every batch enforces too).

A purge that fails on SQLite (a busy or full disk) is logged and tried again at the next interval;
anything else ends the task, and ``/healthz`` says so (503).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3

from services.results.store import ResultStore

log = logging.getLogger("inferq.results")

_STOP_TIMEOUT_S = 5.0


class RetentionTask:
    """Purges `store` every `interval_s` in one task. Start and stop are idempotent; `failed` is
    true once the task ended by itself (it never should)."""

    def __init__(self, store: ResultStore, *, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._store = store
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    @property
    def failed(self) -> bool:
        return self._task is not None and self._task.done()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="results-retention")
            self._task.add_done_callback(_log_end)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None or task.done():
            return  # a task that ended by itself was logged then (`_log_end`)
        task.remove_done_callback(_log_end)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, _STOP_TIMEOUT_S)

    async def _run(self) -> None:
        while True:
            try:
                expired, evicted = await self._store.purge()
            except sqlite3.Error as exc:
                log.error("purging expired results failed, trying again later: %s", exc)  # noqa: TRY400
            else:
                if expired or evicted:
                    log.info("results purged: %d past retention, %d over the size bound", expired, evicted)
            await asyncio.sleep(self._interval_s)


def _log_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        log.error("results retention stopped; /healthz answers 503", exc_info=task.exception())
