"""Work that left the read-ahead and runs until its outcome is durable: calls, expiries, evictions,
refusals, dead letters. One task each; the set is what shutdown drains, within a bound.

Bounded: tasks are counted per source tier (`pending`), and intake takes no more records of a tier
whose count reaches its read-ahead plus the budget (``pausing.py``), so poison, refused and expired
records count against the same bound as requests, and outcomes that cannot be written yet (a slow
broker) pause their tier instead of piling up here.

Lingering calls (`linger`) are backend calls whose request already has its outcome (its deadline
cut the wait, ``execution.py``) and that still hold their token until the backend ends them. They
count against no tier and are not waited for by the drain: it cancels them when it ends, and each
gives its token back as it unwinds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Coroutine

from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier

log = logging.getLogger("inferq.dispatcher")

# After the drain bound, abandoned tasks get this long to unwind (their tokens go back in `finally`).
CANCEL_GRACE_S = 5.0


class InFlight:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        # Tasks per source tier; None: records of the retry topic that have no tier (poison).
        self._by_tier: Counter[Tier | None] = Counter()
        self._lingering: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def pending(self, tier: Tier | None) -> int:
        """Tasks running for records of `tier` (None: tierless poison of the retry topic)."""
        return self._by_tier[tier]

    def begin(self, work: Work, outcome: Coroutine[object, object, None], name: str) -> None:
        """`work` leaves the read-ahead for good: mark it started, then run what produces its outcome."""
        work.begin()
        self.spawn(outcome, name, work.tier)

    def spawn(self, coro: Coroutine[object, object, None], name: str, tier: Tier | None = None) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        self._by_tier[tier] += 1
        task.add_done_callback(functools.partial(self._done, tier))

    def linger(self, coro: Coroutine[object, object, None], name: str) -> None:
        """Run an abandoned backend call until it ends (it bounds itself); cancelled at drain end."""
        task = asyncio.create_task(coro, name=name)
        self._lingering.add(task)
        task.add_done_callback(self._lingering.discard)

    def _done(self, tier: Tier | None, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._by_tier[tier] -= 1
        if not task.cancelled() and (exc := task.exception()) is not None:
            # A bug, not a failed call (those become outcomes): its offset stays uncommitted, so the
            # request is redone by the next owner; say so rather than lose the traceback.
            log.error("%s task failed; its request is left to the next owner", task.get_name(), exc_info=exc)

    async def drain(self, timeout_s: float) -> int:
        """Let running work finish for up to `timeout_s`, then cancel the rest and the lingering
        calls; returns how many of the running work were cancelled."""
        try:
            return await self._drain_work(timeout_s)
        finally:
            await self._cancel_lingering()

    async def _cancel_lingering(self) -> None:
        lingering = set(self._lingering)
        for task in lingering:
            task.cancel()
        if lingering:
            await asyncio.wait(lingering, timeout=CANCEL_GRACE_S)

    async def _drain_work(self, timeout_s: float) -> int:
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
