"""One long-running task of a service (a consumer, a watcher, a sender): logged if it ends by
itself, and cancelled on stop within a bound, so that shutdown never waits on it for ever."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any


class SupervisedTask:
    """`start` runs a coroutine as the named task; if it ends by itself (an error it could not go on
    after, or a return), `ended` is logged as an error with the exception, and `failed` turns true
    (health checks answer 503 on it). `stop` cancels it and waits at most `stop_timeout_s`."""

    def __init__(self, name: str, *, ended: str, stop_timeout_s: float, log: logging.Logger) -> None:
        if stop_timeout_s <= 0:
            raise ValueError(f"stop_timeout_s must be > 0, got {stop_timeout_s}")
        self.name = name
        self._ended = ended
        self._stop_timeout_s = stop_timeout_s
        self._log = log
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        """Started and not stopped since."""
        return self._task is not None

    @property
    def failed(self) -> bool:
        """Whether the task ended by itself."""
        return self._task is not None and self._task.done()

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as the task; nothing (`work` closed unrun) when it is started already."""
        if self._task is not None:
            work.close()
            return
        self._task = asyncio.create_task(work, name=self.name)
        self._task.add_done_callback(self._log_end)

    async def stop(self) -> None:
        """Cancel the task and wait for it, at most `stop_timeout_s` (a task that ended by itself
        was logged then)."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        task.remove_done_callback(self._log_end)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=self._stop_timeout_s)
        if not done:
            self._log.warning("%s did not stop within %g s of its cancel", self.name, self._stop_timeout_s)
        elif not task.cancelled() and task.exception() is not None:
            self._log.error("%s failed while stopping", self.name, exc_info=task.exception())

    def _log_end(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            self._log.error(self._ended, exc_info=task.exception())
