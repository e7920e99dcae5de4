"""Consumer lag per tier, read every few seconds for ``inferq_consumer_lag``.

The records of the request partitions this dispatcher owns that it has not fetched yet (log end less
its fetch position), summed per tier. Ingest's ``inferq_backlog`` counts from the group's commits
instead, so it also holds what is read ahead or running; the two apart tell "not read" from "read,
not done". A lag that cannot be read (a broker away) leaves the tier out, not at zero.
"""

from __future__ import annotations

import asyncio
import logging

from inferq.dispatcher.consumer import TierConsumer
from inferq.dispatcher.errors import ConsumerError
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.messaging.lag import partition_lag
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames

log = logging.getLogger("inferq.dispatcher")

LAG_PROBE_INTERVAL_S = 2.0
LAG_READ_TIMEOUT_S = 1.0


class LagProbe:
    def __init__(
        self,
        consumer: TierConsumer,
        topics: TopicNames,
        metrics: DispatcherMetrics,
        *,
        interval_s: float = LAG_PROBE_INTERVAL_S,
    ) -> None:
        self._consumer = consumer
        self._topics = topics
        self._metrics = metrics
        self._interval_s = interval_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.probe()

    async def probe(self) -> None:
        try:
            unfetched = await self._consumer.unfetched(self._topics.all_requests, LAG_READ_TIMEOUT_S)
        except ConsumerError as exc:
            log.debug("consumer lag unknown this round: %s", exc)
            self._metrics.observe_consumer_lag({})
            return
        lags: dict[Tier, int] = {}
        for partition, (position, end) in unfetched.items():
            tier = self._topics.tier_of(partition.topic)
            if tier is not None:
                lags[tier] = lags.get(tier, 0) + partition_lag(high=end, low=0, committed=position)
        self._metrics.observe_consumer_lag(lags)
