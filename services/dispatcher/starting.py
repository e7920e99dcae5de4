"""Starting: what the scheduler allows and the token pool grants leaves the read-ahead and runs.

Event-driven, not on a tick: one starter task wakes on every arrival, every completion (a token
came back) and every housekeeping change, and starts requests one at a time until the policy says
wait or nothing waits. Each start is `NextStart` (the pure decision the simulator shares) around
an asynchronous `try_acquire`, which a shared pool may refuse: another dispatcher took the token
first, and the pool refreshed its snapshot, so the decision is simply asked again. Tokens freed by
other dispatchers wake nobody here, so with a shared pool blocked work looks again shortly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from services.dispatcher.adaptive import Budget
from services.dispatcher.execution import Execution
from services.dispatcher.inflight import InFlight
from services.dispatcher.next_start import NextStart
from services.dispatcher.pausing import Pauses
from services.dispatcher.tokens import TokenPool
from services.dispatcher.writer import OutcomeWriter

# With a shared pool, tokens freed by other dispatchers wake nobody here: look again this often.
SHARED_POOL_RECHECK_S = 0.02


class Starter:
    def __init__(
        self,
        *,
        next_start: NextStart,
        pool: TokenPool,
        pool_is_shared: bool,
        budget: Budget,
        max_budget: int,
        execution: Execution,
        writer: OutcomeWriter,
        inflight: InFlight,
        pauses: Pauses,
        clock_ms: Callable[[], int],
        wake: asyncio.Event,
    ) -> None:
        self._next = next_start
        self._pool = pool
        self._pool_is_shared = pool_is_shared
        self._budget = budget
        # Bounds one round: a stale snapshot is asked again, not spun on.
        self._max_attempts = 4 * max_budget + 4
        self._execution = execution
        self._writer = writer
        self._inflight = inflight
        self._pauses = pauses
        self._clock_ms = clock_ms
        self._wake = wake

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            blocked = await self.start_ready()
            # Started work left the read-ahead: a paused tier may fetch again.
            self._pauses.update()
            if blocked and self._pool_is_shared:
                asyncio.get_running_loop().call_later(SHARED_POOL_RECHECK_S, self._wake.set)

    async def start_ready(self) -> bool:
        """Start every request the scheduler and the pool allow; True if work waits for a token."""
        for _ in range(self._max_attempts):
            if not self._next.waiting():
                return False
            in_use = self._pool.in_use()
            budget = self._budget.effective
            tier = self._next.tier(in_use, budget, self._clock_ms())
            if tier is None:
                return True
            lease = await self._pool.try_acquire(tier, total_limit=budget, tier_limit=in_use.get(tier, 0) + 1)
            if lease is None:
                continue  # another dispatcher took it first; the pool refreshed its snapshot
            start = self._next.take(tier, self._clock_ms())
            if start is None:  # its partition was revoked while we asked the pool
                await self._pool.release(lease)
                continue
            if start.expired is not None:
                await self._pool.release(lease)
                self._inflight.begin(start.work, self._writer.expire(start.work, start.expired), "expire")
                continue
            self._inflight.begin(start.work, self._execution.call(start.work, lease), "call")
        return True
