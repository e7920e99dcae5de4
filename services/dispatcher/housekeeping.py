"""Housekeeping over the read-ahead, on timers: expiry and aging, the adaptive budget's window, and
(when on) eviction of waiting LOW while a higher tier is over capacity.

Every change wakes the starter: an expired request freed a place in the read-ahead, a promoted one may start
as MEDIUM, a restored budget has room for more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from inferq.dispatcher.adaptive import warn_on_change
from inferq.dispatcher.errors import ConsumerError
from inferq.dispatcher.eviction import PressurePolicy
from inferq.dispatcher.parts import Budgets, HeldBacklog, Instruments, KafkaPorts
from inferq.dispatcher.writer import OutcomeWriter
from inferq.messaging.lag import partition_lag
from inferq.messaging.tiers import Tier

log = logging.getLogger("inferq.dispatcher")

EVICTION_INTERVAL_S = 1.0
LAG_READ_TIMEOUT_S = 2.0


class Housekeeping:
    """Every `interval_s`: expire what waited past its deadline, promote starved LOW, close the
    adaptive budget's latency window."""

    def __init__(
        self,
        *,
        held: HeldBacklog,
        writer: OutcomeWriter,
        budgets: Budgets,
        instruments: Instruments,
        interval_s: float,
        promotion_age_s: float,
    ) -> None:
        self._readahead = held.readahead
        self._writer = writer
        self._inflight = held.inflight
        self._adaptive = budgets.adaptive
        self._metrics = instruments.metrics
        self._clock_ms = instruments.clock_ms
        self._interval_s = interval_s
        self._promotion_age_s = promotion_age_s
        # Set when the sweep changed what may start: the starter waits on it.
        self._wake = budgets.wake

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            self.sweep()

    def sweep(self) -> None:
        expired, promoted = self._readahead.sweep(self._clock_ms())
        for item in expired:
            self._inflight.begin(item.work, self._writer.expire(item.work, item.reason), "expire")
        if promoted:
            self._metrics.record_promoted(promoted)
            log.info("%d LOW requests waited past %.0f s: served as MEDIUM", promoted, self._promotion_age_s)
        if self._adaptive is not None:
            before = self._adaptive.effective
            self._adaptive.tick()
            warn_on_change(self._adaptive, before)
        if expired or promoted or self._adaptive is not None:
            self._wake.set()


class LowEviction:
    """Once a second: while HIGH or MEDIUM has more backlog here than its share of capacity, the LOW
    requests waiting in the read-ahead are answered EVICTED (see ``eviction.py``)."""

    def __init__(
        self,
        *,
        kafka: KafkaPorts,
        held: HeldBacklog,
        writer: OutcomeWriter,
        policy: Callable[[], PressurePolicy],
    ) -> None:
        self._consumer = kafka.consumer
        self._topics = kafka.topics
        # Asked once a round: the capacities follow the learned call times (``call_times.py``).
        self._policy = policy
        self._offsets = held.offsets
        self._readahead = held.readahead
        self._pauses = held.pauses
        self._writer = writer
        self._inflight = held.inflight
        self._pressed: Tier | None = None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(EVICTION_INTERVAL_S)
            try:
                backlog = await self._backlog_by_tier()
            except ConsumerError as exc:
                log.debug("backlog unknown, no eviction this round: %s", exc)
                continue
            self.evict_if_pressed(backlog)

    async def _backlog_by_tier(self) -> dict[Tier, tuple[int, float]]:
        """Per tier: records not yet handled here (not fetched yet, less those a previous owner
        already answered, plus the read-ahead), and the share of the tier's partitions this member
        owns, to compare with its share of the capacity. Fetch positions, not commits: a commit held
        back by one slow call says nothing of the records answered behind it."""
        unfetched = await self._consumer.unfetched(self._topics.all_requests, LAG_READ_TIMEOUT_S)
        if not unfetched:
            return {}
        lags: dict[Tier, int] = dict.fromkeys(Tier, 0)
        owned: dict[Tier, int] = dict.fromkeys(Tier, 0)
        for partition, (position, end) in unfetched.items():
            tier = self._topics.tier_of(partition.topic)
            if tier is not None:
                state = self._offsets.owned_state(partition.topic, partition.partition)
                done = state.done_ahead(position, end) if state is not None else 0
                lags[tier] += partition_lag(high=end, low=0, committed=position) - done
                owned[tier] += 1
        backlog: dict[Tier, tuple[int, float]] = {}
        for tier in Tier:
            total = self._consumer.partition_count(self._topics.requests(tier))
            backlog[tier] = (lags[tier] + self._readahead.held(tier), owned[tier] / total if total else 0.0)
        return backlog

    def evict_if_pressed(self, backlog: dict[Tier, tuple[int, float]]) -> None:
        pressed = self._policy().pressed(backlog)
        if pressed != self._pressed:
            log.warning(
                "%s backlog over capacity: evicting waiting LOW" if pressed else "pressure over: %s",
                pressed or self._pressed,
            )
            self._pressed = pressed
        if pressed is None:
            return
        for work in self._readahead.take_unpromoted_low():
            self._inflight.begin(work, self._writer.evict(work), "evict")
        self._pauses.update()
