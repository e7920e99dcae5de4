"""Admission: the pure policy table, the lag arithmetic, and the ingest app driven by a fake backlog."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]
from starlette.testclient import TestClient

from inferq.ingest.admission import AdmissionPolicy, FillAlarm, default_capacity
from inferq.ingest.app import create_app
from inferq.ingest.backlog import BacklogUnavailableError, KafkaBacklogReader
from inferq.ingest.settings import IngestSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.lag import partition_lag
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier
from tests.support.fakes import FakeBacklog, RecordingProducer
from tests.support.waiting import wait_until

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW

# Small capacities so the table reads easily: HIGH 60 (the documented example), MEDIUM 20, LOW 100.
POLICY = AdmissionPolicy(capacity={H: 60, M: 20, L: 100})


# --- capacities -------------------------------------------------------------------------------


def test_default_capacities_follow_budget_times_target_wait_over_latency():
    policy = AdmissionPolicy.from_deadlines(DEFAULT_DEADLINES_MS)
    # HIGH: 10 x (0.6 x 5 s) / 0.5 s; MEDIUM: 10 x 18 s / 2.8 s = 64.3; LOW: 10 x 25 920 s / 5 s.
    assert dict(policy.capacity) == {H: 60, M: 64, L: 51_840}


def test_explicit_capacity_overrides_only_its_tier():
    policy = AdmissionPolicy.from_deadlines(DEFAULT_DEADLINES_MS, capacity={H: 5}, budget=20)
    assert dict(policy.capacity) == {H: 5, M: 128, L: 103_680}


def test_capacity_is_at_least_one():
    assert default_capacity(budget=1, deadline_ms=100, mean_latency_s=5.0, queue_wait_fraction=0.6) == 1


@pytest.mark.parametrize("bad", [{H: 0, M: 1, L: 1}, {H: 1, M: 1}])
def test_policy_rejects_missing_or_zero_capacity(bad):
    with pytest.raises(ValueError, match="capacity"):
        AdmissionPolicy(capacity=bad)


# --- the decision table -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tier", "backlogs", "full_tier"),
    [
        # Each tier is admitted below its own capacity.
        (H, {H: 59, M: 0, L: 0}, None),
        (M, {H: 0, M: 19, L: 0}, None),
        (L, {H: 0, M: 0, L: 99}, None),
        # HIGH and MEDIUM are refused at their own capacity, and only then.
        (H, {H: 60, M: 0, L: 0}, H),
        (M, {H: 0, M: 20, L: 0}, M),
        (H, {H: 0, M: 500, L: 5_000}, None),
        (M, {H: 500, M: 0, L: 5_000}, None),
        # LOW is refused at its own capacity, and first: whenever HIGH or MEDIUM is full.
        (L, {H: 0, M: 0, L: 100}, L),
        (L, {H: 60, M: 0, L: 0}, H),
        (L, {H: 0, M: 20, L: 0}, M),
        # An unknown backlog never refuses.
        (H, {H: None, M: 0, L: 0}, None),
        (L, {H: None, M: None, L: None}, None),
        (L, {}, None),
        (L, {H: None, M: 25, L: None}, M),
    ],
)
def test_decision_table(tier, backlogs, full_tier):
    refusal = POLICY.decide(tier, backlogs)
    if full_tier is None:
        assert refusal is None
    else:
        assert refusal is not None
        assert (refusal.tier, refusal.full_tier) == (tier, full_tier)
        assert refusal.backlog == backlogs[full_tier]
        assert refusal.capacity == POLICY.capacity[full_tier]


def test_refused_low_names_the_tier_that_drains_last():
    # MEDIUM's excess (21 x 2.8 s / 10 = 5.9 s) outlasts HIGH's (11 x 0.5 s / 10 = 0.55 s).
    refusal = POLICY.decide(L, {H: 70, M: 40, L: 0})
    assert refusal is not None
    assert refusal.full_tier is M
    assert refusal.retry_after_s == 6


def test_disabled_policy_admits_everything():
    policy = AdmissionPolicy(capacity={H: 1, M: 1, L: 1}, enabled=False)
    for tier in Tier:
        assert policy.decide(tier, {H: 10**6, M: 10**6, L: 10**6}) is None


# --- Retry-After ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tier", "backlogs", "retry_after_s"),
    [
        (H, {H: 60}, 1),  # 1 x 0.5 s / 10 rounds up to the 1 s floor
        (H, {H: 73}, 1),  # 14 x 0.5 / 10 = 0.7
        (H, {H: 99}, 2),  # 40 x 0.5 / 10 = 2.0 exactly: no spurious rounding up
        (H, {H: 100}, 3),  # 41 x 0.5 / 10 = 2.05
        (M, {M: 29}, 3),  # 10 x 2.8 / 10 = 2.8
        (H, {H: 60 + 2_000}, 60),  # 100 s clamped to HIGH's 60 s
        (M, {M: 20 + 1_000}, 60),  # 280 s clamped to MEDIUM's 60 s
        (L, {L: 100 + 199}, 100),  # 200 x 5 / 10
        (L, {L: 100 + 5_000}, 600),  # 2 500 s clamped to LOW's 600 s
        (L, {H: 60 + 2_000}, 101),  # LOW refused for HIGH: HIGH's drain time, LOW's clamp
    ],
)
def test_retry_after_is_the_excess_drain_time_clamped(tier, backlogs, retry_after_s):
    refusal = POLICY.decide(tier, backlogs)
    assert refusal is not None
    assert refusal.retry_after_s == retry_after_s


def test_refusal_body_names_the_full_tier():
    refusal = POLICY.decide(H, {H: 73})
    assert refusal is not None
    assert refusal.body() == {
        "error": "tier HIGH is over capacity (backlog 73, capacity 60); retry later",
        "retry_after_s": 1,
        "tier": "HIGH",
        "backlog": 73,
        "capacity": 60,
    }


# --- the 70% alarm and the lag arithmetic ------------------------------------------------------


def test_fill_alarm_reports_each_upward_crossing_once():
    alarm = FillAlarm(threshold=0.7, rearm_margin=0.05)
    assert alarm.observe({H: 0.5}) == ([], [])
    assert alarm.observe({H: 0.71, M: 0.9}) == ([H, M], [])
    assert alarm.observe({H: 0.99, M: 1.5}) == ([], [])
    assert alarm.observe({H: 0.68, M: None}) == ([], [])  # inside the margin; unknown changes nothing
    assert alarm.observe({H: 0.6, M: 0.2}) == ([], [H, M])
    assert alarm.observe({H: 0.8}) == ([H], [])
    assert alarm.above() == {H}


@pytest.mark.parametrize(
    ("high", "low", "committed", "lag"),
    [
        (10, 0, None, 10),  # never committed: everything still there is backlog
        (10, 4, None, 6),
        (10, 0, 7, 3),
        (10, 0, 10, 0),
        (10, 6, 2, 4),  # committed below retention: only what remains counts
        (0, 0, None, 0),
    ],
)
def test_partition_lag(high, low, committed, lag):
    assert partition_lag(high=high, low=low, committed=committed) == lag


def test_reader_against_an_unreachable_broker_reports_unknown_in_bounded_time():
    reader = KafkaBacklogReader(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "g", timeout_s=0.5)
    started = time.monotonic()
    snapshot = reader.refresh()
    assert time.monotonic() - started < 2.0
    assert not any(snapshot.known(t) for t in Tier)
    assert reader.snapshot().backlogs == dict.fromkeys(Tier)


class _OneTopicAdmin:
    """list_topics and list_offsets of a broker holding 10 records on each request partition."""

    def __init__(self, topics: list[str]) -> None:
        self._topics = topics

    def list_topics(self, timeout: float) -> Any:
        partition = type("P", (), {})
        topic = type("T", (), {"error": None, "partitions": {0: partition()}})
        return type("M", (), {"topics": {t: topic() for t in self._topics}})()

    def list_offsets(self, specs: dict[Any, Any], request_timeout: float) -> dict[Any, Any]:
        from concurrent.futures import Future

        def done(offset: int) -> Future[Any]:
            future: Future[Any] = Future()
            future.set_result(type("R", (), {"offset": offset})())
            return future

        return {tp: done(10 if spec == OffsetSpec.latest() else 0) for tp, spec in specs.items()}


class _CoordinatorLoading:
    """The group's commits after `failures` answers of "not coordinator" (a broker just started)."""

    def __init__(self, failures: int, code: int = KafkaError.NOT_COORDINATOR) -> None:
        self.failures, self.code, self.asked = failures, code, 0

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asked += 1
        if self.asked <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return [TopicPartition(tp.topic, tp.partition, 4) for tp in partitions]


def _reader_with(commits: _CoordinatorLoading, timeout_s: float = 2.0) -> KafkaBacklogReader:
    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1")
    reader = KafkaBacklogReader(kafka, "g", timeout_s=timeout_s)
    reader._admin = _OneTopicAdmin([kafka.topics.requests(t) for t in Tier])  # type: ignore[assignment]
    reader._commits = commits  # type: ignore[assignment]
    return reader


@pytest.mark.parametrize("code", [KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
def test_a_moving_group_coordinator_is_asked_again_within_the_read(code):
    commits = _CoordinatorLoading(failures=2, code=code)
    snapshot = _reader_with(commits).read_once()
    assert commits.asked == 3
    assert dict(snapshot.backlogs) == dict.fromkeys(Tier, 6)  # 10 written, 4 committed


def test_a_coordinator_that_never_settles_ends_the_read_at_its_deadline():
    started = time.monotonic()
    with pytest.raises(BacklogUnavailableError, match=r"within 0\.5 s"):
        _reader_with(_CoordinatorLoading(failures=10**6), timeout_s=0.5).read_once()
    assert time.monotonic() - started < 2.0


def test_any_other_commit_error_ends_the_read_at_once():
    commits = _CoordinatorLoading(failures=1, code=KafkaError.GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(BacklogUnavailableError, match="GROUP_AUTHORIZATION_FAILED"):
        _reader_with(commits).read_once()
    assert commits.asked == 1


# --- the app with a fake backlog source --------------------------------------------------------


def app_client(backlog: FakeBacklog, producer: RecordingProducer, **settings: Any) -> TestClient:
    settings.setdefault("backlog_capacity", {H: 10, M: 10, L: 10})
    app = create_app(IngestSettings(**settings), producer=producer, check_topics=False, backlog=backlog)
    return TestClient(app)


def chat(**extra: Any) -> dict[str, Any]:
    return {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]} | extra


def brief() -> dict[str, Any]:
    return {"scenario": "morning_brief", "messages": [{"role": "user", "content": "news"}]}


def test_full_tier_answers_429_with_retry_after_and_writes_nothing():
    backlog, producer = FakeBacklog(HIGH=73, MEDIUM=0, LOW=0), RecordingProducer()
    with app_client(backlog, producer, backlog_capacity={H: 60, M: 10, L: 10}) as c:
        r = c.post("/v1/requests", json=chat())
        assert backlog.running
    assert not backlog.running
    assert r.status_code == 429
    assert r.headers["retry-after"] == "1"
    assert r.json() == {
        "error": "tier HIGH is over capacity (backlog 73, capacity 60); retry later",
        "retry_after_s": 1,
        "tier": "HIGH",
        "backlog": 73,
        "capacity": 60,
    }
    assert producer.sent == []


def test_low_is_refused_while_high_is_full_and_medium_still_gets_in():
    backlog, producer = FakeBacklog(HIGH=10, MEDIUM=0, LOW=0), RecordingProducer()
    with app_client(backlog, producer) as c:
        low = c.post("/v1/requests", json=brief())
        medium = c.post("/v1/requests", json=chat(scenario="emotion_analysis"))
        backlog.lags[H] = 9
        low_again = c.post("/v1/requests", json=brief())
    assert low.status_code == 429
    assert "tier HIGH is over capacity (backlog 10, capacity 10)" in low.json()["error"]
    assert medium.status_code == 202
    assert low_again.status_code == 202
    assert [topic for topic, _, _ in producer.sent] == ["inferq.requests.medium", "inferq.requests.low"]


def test_unknown_backlog_and_disabled_admission_let_requests_through():
    producer = RecordingProducer()
    with app_client(FakeBacklog(), producer) as c:
        unknown = c.post("/v1/requests", json=chat())
    with app_client(FakeBacklog(HIGH=1_000), producer, admission_enabled=False) as c:
        disabled = c.post("/v1/requests", json=chat())
    assert (unknown.status_code, disabled.status_code) == (202, 202)
    assert len(producer.sent) == 2


def test_resend_of_an_accepted_request_is_replayed_even_when_the_tier_filled_up():
    backlog, producer = FakeBacklog(HIGH=0), RecordingProducer()
    with app_client(backlog, producer) as c:
        first = c.post("/v1/requests", json=chat(request_id="r-1"))
        backlog.lags[H] = 50
        resend = c.post("/v1/requests", json=chat(request_id="r-1"))
        refused = c.post("/v1/requests", json=chat(request_id="r-2"))
        backlog.lags[H] = 0
        retried = c.post("/v1/requests", json=chat(request_id="r-2"))
    assert first.status_code == 202 and resend.status_code == 202
    assert resend.json()["duplicate"] is True
    assert refused.status_code == 429
    assert retried.status_code == 202 and retried.json()["duplicate"] is False  # a refusal is not remembered
    assert len(producer.sent) == 2


def test_backlog_endpoint_reports_each_tier():
    with app_client(FakeBacklog(HIGH=8, MEDIUM=None, LOW=3), RecordingProducer()) as c:
        view = c.get("/v1/backlog").json()
    assert view == {
        "HIGH": {
            "backlog": 8,
            "capacity": 10,
            "fill_ratio": 0.8,
            "refreshed_at_ms": 1_700_000_000_000,
            "known": True,
        },
        "MEDIUM": {
            "backlog": None,
            "capacity": 10,
            "fill_ratio": None,
            "refreshed_at_ms": 1_700_000_000_000,
            "known": False,
        },
        "LOW": {
            "backlog": 3,
            "capacity": 10,
            "fill_ratio": 0.3,
            "refreshed_at_ms": 1_700_000_000_000,
            "known": True,
        },
    }


def alerts(caplog: pytest.LogCaptureFixture, tier: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "inferq.ingest"
        and r.levelno == logging.WARNING
        and r.getMessage().startswith(f"tier {tier} ")
    ]


def test_crossing_70_percent_logs_once_per_crossing(caplog):
    caplog.set_level(logging.INFO, logger="inferq.ingest")
    backlog = FakeBacklog(HIGH=8, MEDIUM=0, LOW=0)
    with app_client(backlog, RecordingProducer()) as c:
        for _ in range(5):
            assert c.post("/v1/requests", json=chat()).status_code == 202
        assert len(alerts(caplog, "HIGH")) == 1
        backlog.lags[H] = 2
        assert c.post("/v1/requests", json=chat()).status_code == 202
        backlog.lags[H] = 9
        for _ in range(3):
            assert c.post("/v1/requests", json=chat()).status_code == 202
    [first, second] = alerts(caplog, "HIGH")
    assert "backlog 8, capacity 10" in first.getMessage()
    assert "backlog 9, capacity 10" in second.getMessage()
    assert alerts(caplog, "MEDIUM") == [] and alerts(caplog, "LOW") == []


def test_crossing_is_alerted_without_any_request(caplog):
    # Batch producers write to Kafka directly: the alert must not wait for an HTTP request.
    caplog.set_level(logging.WARNING, logger="inferq.ingest")
    backlog = FakeBacklog(HIGH=0, MEDIUM=0, LOW=0)
    with app_client(backlog, RecordingProducer(), backlog_refresh_s=0.02):
        backlog.lags[L] = 8
        wait_until(lambda: alerts(caplog, "LOW"), "the LOW crossing alerted", 5.0)
    assert len(alerts(caplog, "LOW")) == 1


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("INFERQ_DISPATCHER_GROUP_ID", "other-dispatchers")
    monkeypatch.setenv("INFERQ_INGEST_BACKLOG_CAPACITY", '{"HIGH": 5}')
    monkeypatch.setenv("INFERQ_TYPICAL_LATENCY_S", '{"MEDIUM": 1.8}')
    monkeypatch.setenv("INFERQ_INGEST_ADMISSION_ENABLED", "false")
    settings = IngestSettings()
    policy = settings.admission_policy()
    assert settings.dispatcher_group == "other-dispatchers"
    assert dict(policy.capacity) == {H: 5, M: 100, L: 51_840}  # MEDIUM: 10 x 18 s / 1.8 s
    assert policy.mean_latency_s[H] == 0.5
    assert policy.enabled is False


def test_refresh_interval_is_at_most_a_second():
    with pytest.raises(ValueError, match="backlog_refresh_s"):
        IngestSettings(backlog_refresh_s=5.0)
