"""Work that left the read-ahead and runs until its outcome is durable: calls, expiries, evictions,
dead letters. One task each; the set is what shutdown drains, within a bound."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine

from services.dispatcher.work import Work

log = logging.getLogger("inferq.dispatcher")

# After the drain bound, abandoned tasks get this long to unwind (their tokens go back in `finally`).
CANCEL_GRACE_S = 5.0


class InFlight:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def begin(self, work: Work, outcome: Coroutine[object, object, None], name: str) -> None:
        """`work` leaves the read-ahead for good: mark it started, then run what produces its outcome."""
        work.begin()
        self.spawn(outcome, name)

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # A bug, not a failed call (those become outcomes): its offset stays uncommitted, so the
            # request is redone by the next owner; say so rather than lose the traceback.
            log.error("%s task failed; its request is left to the next owner", task.get_name(), exc_info=exc)

    async def drain(self, timeout_s: float) -> int:
        """Let running work finish for up to `timeout_s`, then cancel the rest; returns how many."""
        if not self._tasks:
            return 0
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            log.warning(
                "%d calls still running after %.0f s; left to the next owner", len(pending), timeout_s
            )
            await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
        return len(pending)
