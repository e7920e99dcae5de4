"""The 70% alarm and its timer alone, with a fake backlog."""

from __future__ import annotations

import asyncio
import logging

import pytest

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.backlog_watch import BacklogAlarm, BacklogWatcher
from inferq.messaging.tiers import Tier
from tests.support.fakes import FakeBacklog
from tests.support.waiting import eventually

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
POLICY = AdmissionPolicy(capacity={H: 10, M: 10, L: 100})


def ingest_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "inferq.ingest"]


def test_alarm_warns_once_per_crossing_and_says_when_a_tier_is_back(caplog):
    caplog.set_level(logging.INFO, logger="inferq.ingest")
    alarm = BacklogAlarm(POLICY, alert_ratio=0.7)
    backlog = FakeBacklog(HIGH=8, MEDIUM=None, LOW=0)
    assert alarm.observe(backlog.snapshot()) == ([H], [])
    assert alarm.observe(backlog.snapshot()) == ([], [])
    backlog.lags[H] = 2
    assert alarm.observe(backlog.snapshot()) == ([], [H])
    assert ingest_lines(caplog) == [
        (
            logging.WARNING,
            "tier HIGH backlog above 70% of capacity (backlog 8, capacity 10): LOW is shed first",
        ),
        (logging.INFO, "tier HIGH backlog back under 70% of capacity"),
    ]


def test_watcher_alerts_without_any_request_and_stops_cleanly(caplog):
    caplog.set_level(logging.WARNING, logger="inferq.ingest")
    backlog = FakeBacklog(HIGH=0, MEDIUM=0, LOW=0)
    watcher = BacklogWatcher(backlog, BacklogAlarm(POLICY, alert_ratio=0.7), interval_s=0.01)

    async def scenario() -> None:
        await watcher.start()
        await watcher.start()  # idempotent: still one task
        tasks = [t for t in asyncio.all_tasks() if t.get_name() == "ingest-backlog-watch"]
        assert len(tasks) == 1 and watcher.running
        backlog.lags[L] = 80
        await eventually(lambda: ingest_lines(caplog), "a backlog line logged", 5.0, interval_s=0.01)
        await watcher.stop()
        await watcher.stop()  # idempotent
        assert not watcher.running
        assert tasks[0].cancelled()

    asyncio.run(scenario())
    assert ingest_lines(caplog) == [
        (
            logging.WARNING,
            "tier LOW backlog above 70% of capacity (backlog 80, capacity 100): LOW is shed first",
        )
    ]


def test_watcher_needs_a_positive_interval():
    with pytest.raises(ValueError, match="interval_s"):
        BacklogWatcher(FakeBacklog(), BacklogAlarm(POLICY, alert_ratio=0.7), interval_s=0)


class _Committed:
    """A committed TopicPartition whose metadata reads as confluent-kafka's does."""

    def __init__(self, metadata: object) -> None:
        self._metadata = metadata

    @property
    def metadata(self) -> object:
        if isinstance(self._metadata, bytes):
            return self._metadata.decode("utf-8")  # raises as confluent-kafka's C code does
        return self._metadata


def test_commit_metadata_that_is_not_utf8_reads_as_none_instead_of_ending_the_reader():
    from inferq.messaging.commit_metadata import readable_metadata

    assert readable_metadata(_Committed("v2:2-4,7;")) == "v2:2-4,7;"
    assert readable_metadata(_Committed(b"v2:2\x96\xff;")) is None
    assert readable_metadata(_Committed(None)) is None
    assert readable_metadata(_Committed(42)) is None


def test_a_watch_whose_snapshot_raises_is_logged_and_no_longer_running(caplog):
    class BrokenBacklog(FakeBacklog):
        def snapshot(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("backlog reader gone")

    watcher = BacklogWatcher(
        BrokenBacklog(HIGH=0, MEDIUM=0, LOW=0), BacklogAlarm(POLICY, alert_ratio=0.7), interval_s=0.01
    )

    async def scenario() -> None:
        await watcher.start()
        await eventually(lambda: not watcher.running, "the watcher ended", 5.0, interval_s=0.01)
        await watcher.stop()

    asyncio.run(scenario())
    assert "backlog watcher stopped" in caplog.text
    assert "backlog reader gone" in caplog.text
