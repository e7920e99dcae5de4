"""Regional reply topics under ACLs (the secured broker): the dispatcher writes a region's results,
the results principal reads one region's or, by pattern, every region's (every partition, no group)."""

from __future__ import annotations

import asyncio

import pytest

from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.results.feed import KafkaResultFeed
from inferq.results.settings import ResultsSettings
from inferq.tools.broker.broker import LocalBroker
from inferq.tools.broker.security import ADMIN
from tests.integration.test_security_kafka import produce, settings

pytestmark = pytest.mark.kafka


async def read_feed(results: KafkaSettings, prefix: str, region: str, expect: int) -> list[tuple[str, bytes]]:
    """What the results service's own consumer for `region` reads: (topic, value), `expect` of them."""
    service = ResultsSettings(kafka=results, group_id=f"{prefix}-results", region=region)

    async def nothing_stored() -> dict[object, int]:
        return {}

    feed = KafkaResultFeed(service, nothing_stored)
    await feed.start()
    read: list[tuple[str, bytes]] = []
    try:
        async with asyncio.timeout(45):
            while len(read) < expect:
                batches = await feed.getmany(timeout_ms=500, max_records=100)
                read += [(tp.topic, r.value or b"") for tp, records in batches.items() for r in records]
    finally:
        await feed.stop()
    return read


def test_a_results_service_reads_its_region_or_all_regions_under_acls(
    secured_broker: LocalBroker, secured_prefix: str
) -> None:
    admin = secured_broker.client_settings(ADMIN, topic_prefix=secured_prefix)
    create_topics(admin, regions=["eu"])
    dispatcher = settings(secured_broker, "dispatcher", secured_prefix)
    results = settings(secured_broker, "results", secured_prefix)
    topics = results.topics
    eu = topics.regional_results("eu")
    written = asyncio.run(produce(dispatcher, [(eu, b"for eu"), (topics.results, b"for anyone")]))
    assert all(isinstance(offset, int) for offset in written), written

    assert asyncio.run(read_feed(results, secured_prefix, "eu", expect=1)) == [(eu, b"for eu")]
    everything = asyncio.run(read_feed(results, secured_prefix, "all", expect=2))
    assert sorted(everything) == sorted([(eu, b"for eu"), (topics.results, b"for anyone")])
