"""The backlog reader and admission against the real broker: lag = high watermark - committed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.backlog import BacklogSnapshot, KafkaBacklogReader
from inferq.ingest.settings import IngestSettings
from inferq.messaging.tiers import Tier
from tests.support.kafka import a_request, commit_offsets, committed_offsets, end_offsets, produce_requests
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka

WAIT_S = 15.0


def expected_lag(bootstrap: str, group: str, topic: str) -> int:
    """High watermark minus committed offset (0 where nothing is committed), computed independently."""
    ends = end_offsets(bootstrap, topic)
    committed = committed_offsets(bootstrap, group, topic)
    return sum(end - max(committed.get(p, -1), 0) for p, end in ends.items())


def test_reader_reports_high_watermark_minus_committed_per_tier(kafka_settings):
    bootstrap, topics = kafka_settings.bootstrap_servers, kafka_settings.topics
    group = f"{kafka_settings.topic_prefix}-dispatcher"
    high, medium = topics.requests(Tier.HIGH), topics.requests(Tier.MEDIUM)
    produce_requests(bootstrap, high, [a_request("HIGH") for _ in range(4)], partition=0)
    produce_requests(bootstrap, high, [a_request("HIGH") for _ in range(3)], partition=1)
    produce_requests(bootstrap, medium, [a_request("MEDIUM") for _ in range(5)], partition=2)
    # No dispatcher runs; the group has consumed 3 of HIGH[0] and 4 of MEDIUM[2], nothing of HIGH[1].
    commit_offsets(bootstrap, group, {(high, 0): 3, (medium, 2): 4})

    reader = KafkaBacklogReader(kafka_settings, group, refresh_interval_s=0.1, timeout_s=5.0)
    once = reader.read_once()
    assert dict(once.backlogs) == {Tier.HIGH: 1 + 3, Tier.MEDIUM: 1, Tier.LOW: 0}
    assert once.backlogs[Tier.HIGH] == expected_lag(bootstrap, group, high)
    assert once.backlogs[Tier.MEDIUM] == expected_lag(bootstrap, group, medium)
    assert reader.last_refresh_s is None  # read_once alone publishes nothing

    async def refreshed_in_background() -> BacklogSnapshot:
        await reader.start()
        try:
            commit_offsets(bootstrap, group, {(high, 1): 3})
            return await asyncio.to_thread(
                wait_until,
                reader.snapshot,
                "HIGH lag 1 after the commit",
                WAIT_S,
                done=lambda s: s.backlogs[Tier.HIGH] == 1,
                interval_s=0.05,
            )
        finally:
            await reader.stop()

    snapshot = asyncio.run(refreshed_in_background())
    assert dict(snapshot.backlogs) == {Tier.HIGH: 1, Tier.MEDIUM: 1, Tier.LOW: 0}
    assert (
        snapshot.refreshed_at_ms is not None and abs(snapshot.refreshed_at_ms - time.time() * 1000) < 10_000
    )
    assert reader.last_refresh_s is not None and reader.last_refresh_s < 5.0


def test_ingest_refuses_high_at_capacity_and_accepts_after_the_group_commits(kafka_settings):
    bootstrap, topics = kafka_settings.bootstrap_servers, kafka_settings.topics
    group = f"{kafka_settings.topic_prefix}-dispatcher"
    high = topics.requests(Tier.HIGH)
    produce_requests(bootstrap, high, [a_request("HIGH") for _ in range(4)])
    settings = IngestSettings(
        kafka=kafka_settings,
        dispatcher_group=group,
        backlog_capacity={Tier.HIGH: 5},
        backlog_refresh_s=0.1,
        backlog_timeout_s=5.0,
    )
    chat = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}
    brief = {"scenario": "morning_brief", "messages": [{"role": "user", "content": "news"}]}

    with TestClient(create_app(settings, check_topics=True)) as c:

        def high_backlog() -> Any:
            return c.get("/v1/backlog").json()["HIGH"]

        wait_until(high_backlog, "HIGH backlog 4", WAIT_S, done=lambda v: v["backlog"] == 4, interval_s=0.05)
        assert c.post("/v1/requests", json=chat).status_code == 202  # 4 < 5: the fifth gets in
        view = wait_until(
            high_backlog, "HIGH backlog 5", WAIT_S, done=lambda v: v["backlog"] == 5, interval_s=0.05
        )
        assert view == {
            "backlog": 5,
            "capacity": 5,
            "fill_ratio": 1.0,
            "refreshed_at_ms": view["refreshed_at_ms"],
            "known": True,
        }

        refused = c.post("/v1/requests", json=chat)
        low = c.post("/v1/requests", json=brief)
        medium = c.post("/v1/requests", json=chat | {"scenario": "emotion_analysis"})
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"] == "tier HIGH is over capacity (backlog 5, capacity 5); retry later"
        assert low.status_code == 429 and low.json()["tier"] == "HIGH"  # LOW is shed while HIGH is full
        assert medium.status_code == 202
        assert sum(end_offsets(bootstrap, high).values()) == 5  # the refused request was not written

        # The dispatchers catch up: the group commits every HIGH partition to its end.
        commit_offsets(bootstrap, group, {(high, p): end for p, end in end_offsets(bootstrap, high).items()})
        wait_until(high_backlog, "HIGH backlog 0", WAIT_S, done=lambda v: v["backlog"] == 0, interval_s=0.05)
        assert c.post("/v1/requests", json=chat).status_code == 202
        assert c.post("/v1/requests", json=brief).status_code == 202
