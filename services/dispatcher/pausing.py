"""Back-pressure as paused partitions: the backlog waits in Kafka, not in this process.

Pausing is desired state, computed from the read-ahead and re-applied to whatever the consumer owns
(aiokafka forgets pauses across a rebalance, so the checkpoint calls `apply` on every assignment):

- a tier whose read-ahead holds `per_tier` requests or more has its request partitions paused, and
  so has a tier with `per_tier` + `max_budget` tasks running (``inflight.py``: calls, and outcomes
  not yet written, e.g. of poison or expired records while the broker is slow);
- the retry topic is paused while the whole read-ahead (every tier's share) is full;
- a partition tracking `offsets.MAX_UNCOMMITTED` offsets beyond its commit point (one slow call at
  its head, many done behind it) is paused until the head completes, except while intake reads it
  again for its deferred records (``deferred.py``): those are in the window already, and the head
  may be one of them;
- a retry partition whose head record is not due yet is held back, paused, until it is; a timer
  releases it then (it is fetched again and the head admitted, or held back again).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from inferq.dispatcher.consumer import Partition, TierConsumer
from inferq.dispatcher.inflight import InFlight
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.offsets import OffsetTracker
from inferq.dispatcher.readahead import ReadAhead
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames


class Pauses:
    def __init__(
        self,
        consumer: TierConsumer,
        topics: TopicNames,
        readahead: ReadAhead,
        metrics: DispatcherMetrics,
        *,
        per_tier: int,
        inflight: InFlight,
        offsets: OffsetTracker,
        max_budget: int,
        rereading: Callable[[Partition], bool],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._topics = topics
        self._readahead = readahead
        self._metrics = metrics
        self._per_tier = per_tier
        # Required, never a fresh default: an InFlight or OffsetTracker of its own would see no task
        # and no offset, and the task and window pauses would silently never happen.
        self._inflight = inflight
        self._offsets = offsets
        # Running calls are bounded by the budget; beyond it, tasks are outcomes waiting to be written.
        self._max_tasks = per_tier + max_budget
        self._monotonic = monotonic
        self._full_tiers: set[Tier] = set()
        self._full_windows: set[Partition] = set()
        self._retries_full = False
        self._everything = False
        # Retry partitions held back until their head record's not-before time (monotonic seconds).
        self._held_back: dict[Partition, float] = {}
        # Whether intake reads a partition again for deferred records (`deferred.ReadPositions`).
        self._reads_again = rereading
        self._rereading: set[Partition] = set()

    def tier_is_full(self, tier: Tier) -> bool:
        return self._readahead.held(tier) >= self._per_tier or self._inflight.pending(tier) >= self._max_tasks

    def readahead_is_full(self) -> bool:
        """The whole read-ahead is taken (or as many tasks run as all tiers may have): retries wait
        in Kafka too."""
        tiers = len(Tier)
        return (
            len(self._readahead) >= tiers * self._per_tier or len(self._inflight) >= tiers * self._max_tasks
        )

    def update(self) -> None:
        """Pause exactly the tiers whose read-ahead is full (and retries if all of it is), and the
        partitions whose window of uncommitted offsets is."""
        full = {t for t in Tier if self.tier_is_full(t)}
        retries = self.readahead_is_full()
        windows = {Partition(s.topic, s.partition) for s in self._offsets.owned() if s.window_full()}
        rereading = {p for p in windows if self._reads_again(p)}
        if (
            full != self._full_tiers
            or retries != self._retries_full
            or windows != self._full_windows
            or rereading != self._rereading
        ):
            self._full_tiers, self._retries_full, self._full_windows = full, retries, windows
            self._rereading = rereading
            self.apply()
        self._metrics.observe_readahead(self._readahead, len(self._consumer.paused()))

    def hold_back(self, partition: Partition, delay_s: float) -> None:
        """Pause a retry partition for `delay_s`, until its head record is due."""
        self._held_back[partition] = self._monotonic() + delay_s
        self.apply()
        asyncio.get_running_loop().call_later(delay_s, self.release, partition)

    def release(self, partition: Partition) -> None:
        self._held_back.pop(partition, None)
        self.apply()

    def pause_everything(self) -> None:
        """Shutdown: nothing more is fetched (the fetcher would otherwise keep prefetching)."""
        self._everything = True
        self.apply()

    def apply(self) -> None:
        """Make the consumer's paused set match the desired state, over what it owns now."""
        owned = self._consumer.assignment()
        now = self._monotonic()
        for partition in [p for p, until in self._held_back.items() if until <= now or p not in owned]:
            del self._held_back[partition]
        pause = {p for p in owned if self._everything or self._held(p)}
        self._consumer.pause(pause)
        self._consumer.resume(owned - pause)

    def _held(self, partition: Partition) -> bool:
        if partition in self._full_windows and partition not in self._rereading:
            return True
        if partition.topic == self._topics.retry:
            return self._retries_full or partition in self._held_back
        return self._topics.tier_of(partition.topic) in self._full_tiers

    def paused_by_tier(self) -> dict[str, int]:
        """Paused partitions per tier's request topic, and ``retry`` for the retry topic's."""
        counts = {t.value: 0 for t in Tier} | {"retry": 0}
        for partition in self._consumer.paused():
            tier = self._topics.tier_of(partition.topic)
            if tier is not None:
                counts[tier.value] += 1
            elif partition.topic == self._topics.retry:
                counts["retry"] += 1
        return counts
