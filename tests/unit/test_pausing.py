"""Back-pressure as desired paused state, applied to the in-memory consumer."""

from __future__ import annotations

from inferq.dispatcher.consumer import Partition
from inferq.dispatcher.deferred import ReadPositions
from inferq.dispatcher.inflight import InFlight
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.offsets import OffsetTracker, PartitionOffsets
from inferq.dispatcher.pausing import Pauses
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames
from tests.support.dispatcher_fakes import InMemoryConsumer
from tests.support.loop import in_loop
from tests.support.waiting import eventually
from tests.support.work import a_work

TOPICS = TopicNames("unit")


class Listener:
    def __init__(self, pauses: Pauses) -> None:
        self.pauses = pauses

    async def on_revoked(self, revoked: list[Partition]) -> None:
        return None

    async def on_assigned(self, assigned: list[Partition]) -> None:
        self.pauses.apply()


def waiting(tier: Tier, n: int) -> list[Work]:
    return [
        a_work(tier, i, offsets=PartitionOffsets("t", 0), request_id="r", expire_at_ms=1) for i in range(n)
    ]


def setup(per_tier: int = 2) -> tuple[InMemoryConsumer, ReadAhead, Pauses]:
    consumer = InMemoryConsumer.for_topics(TOPICS, partitions_each=2)
    readahead = ReadAhead(promotion_age_ms=60_000)
    metrics = DispatcherMetrics(tokens_in_use=dict, tokens_held=dict, effective_budget=lambda: 1)
    offsets = OffsetTracker()
    pauses = Pauses(
        consumer,
        TOPICS,
        readahead,
        metrics,
        per_tier=per_tier,
        inflight=InFlight(),
        offsets=offsets,
        max_budget=0,
        rereading=ReadPositions(offsets).rereading,
    )
    return consumer, readahead, pauses


def partitions(topic: str) -> set[Partition]:
    return {Partition(topic, 0), Partition(topic, 1)}


@in_loop
async def test_a_full_tier_is_paused_and_stays_paused_across_a_rebalance() -> None:
    consumer, readahead, pauses = setup()
    await consumer.start(Listener(pauses))
    for item in waiting(Tier.LOW, 2):
        readahead.add(item)
    pauses.update()
    assert consumer.paused() == partitions(TOPICS.requests(Tier.LOW))
    await consumer.rebalance(set(consumer.logs))  # the consumer forgets its pauses
    assert consumer.paused() == partitions(TOPICS.requests(Tier.LOW))
    readahead.pop(Tier.LOW)
    pauses.update()
    assert consumer.paused() == set()


@in_loop
async def test_retries_pause_only_when_the_whole_read_ahead_is_full() -> None:
    consumer, readahead, pauses = setup(per_tier=1)
    await consumer.start(Listener(pauses))
    for tier in Tier:
        readahead.add(waiting(tier, 1)[0])
    pauses.update()
    assert partitions(TOPICS.retry) <= consumer.paused()
    # What inferq_paused_partitions_by_tier reports when scraped.
    assert pauses.paused_by_tier() == {"HIGH": 2, "MEDIUM": 2, "LOW": 2, "retry": 2}


@in_loop
async def test_a_held_back_retry_partition_is_released_when_due() -> None:
    consumer, _, pauses = setup()
    await consumer.start(Listener(pauses))
    held = Partition(TOPICS.retry, 1)
    pauses.hold_back(held, 0.05)
    assert consumer.paused() == {held}
    await eventually(lambda: not consumer.paused(), "the held partition resumed", 2, interval_s=0.01)
