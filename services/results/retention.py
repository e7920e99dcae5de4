"""The results store's retention, run in the background: every `interval_s`, expired results are
deleted (and the oldest past the size bound, which every batch enforces too).

A purge that fails on SQLite (a busy or full disk) is logged and tried again at the next interval;
anything else ends the task, and ``/healthz`` says so (503).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3

from inferq.results.store import ResultStore
from inferq.supervised import SupervisedTask

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
        self._task = SupervisedTask(
            "results-retention",
            ended="results retention stopped; /healthz answers 503",
            stop_timeout_s=_STOP_TIMEOUT_S,
            log=log,
        )

    @property
    def failed(self) -> bool:
        return self._task.failed

    async def start(self) -> None:
        if not self._task.started:
            self._task.start(self._run())

    async def stop(self) -> None:
        await self._task.stop()

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
