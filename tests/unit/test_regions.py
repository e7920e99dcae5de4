"""Regional reply topics without a broker: the region rule, the topic and its pattern, a regional
ingest's default reply topic (for every tenant), and which topics a results service serves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.cli import main
from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceRequest
from inferq.messaging.reply_topics import is_allowed_reply_topic, region_problem
from inferq.messaging.topics import TopicNames
from inferq.results.settings import ResultsSettings
from inferq.tenancy.settings import TenancySettings
from tests.support.fakes import FakeBacklog, RecordingProducer
from tests.support.tenants import TenantSpec, write_tenants

CHAT: dict[str, Any] = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(autouse=True)
def _no_region_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("INFERQ_REGION", "INFERQ_INGEST_REGION", "INFERQ_RESULTS_REGION", "INFERQ_RESULTS_GROUP_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("region", ["eu", "us-east-1", "a", "x" * 32])
def test_a_region_is_lowercase_letters_digits_or_dash(region: str) -> None:
    assert region_problem(region) is None
    assert is_allowed_reply_topic(TopicNames("p").regional_results(region), TopicNames("p"))


@pytest.mark.parametrize(
    ("region", "says"),
    [
        ("EU", "lowercase"),
        ("eu.west", "lowercase"),
        ("eu_west", "lowercase"),
        ("", "lowercase"),
        ("x" * 33, "1-32"),
        ("retry", "word of the topic table"),
        ("dlq", "word of the topic table"),
        ("results", "word of the topic table"),
    ],
)
def test_anything_else_is_no_region(region: str, says: str) -> None:
    problem = region_problem(region)
    assert problem is not None and says in problem


def test_a_regional_topic_is_configured_as_the_results_topic() -> None:
    topics = TopicNames("p")
    results = next(s for s in topics.specs() if s.name == "p.results")
    eu = topics.regional_results_spec("eu")
    assert eu.name == "p.results.eu"
    assert (eu.partitions, eu.config()) == (results.partitions, results.config())


def test_each_reply_topic_has_its_chunk_topic_with_short_retention() -> None:
    topics = TopicNames("p")
    assert topics.chunks_for("p.results") == "p.chunks"
    assert topics.chunks_for("p.results.eu") == "p.chunks.eu"
    chunks = next(s for s in topics.specs() if s.name == "p.chunks")
    # Tokens are transient: minutes of retention, and segments that close so retention can act.
    assert int(chunks.config()["retention.ms"]) <= 3_600_000
    assert int(chunks.config()["segment.ms"]) <= int(chunks.config()["retention.ms"])
    eu = [s.name for s in topics.regional_specs("eu")]
    assert eu == ["p.results.eu", "p.chunks.eu"]
    assert topics.regional_chunks_spec("eu").config() == chunks.config()
    pattern = re.compile(topics.chunks_pattern)
    assert pattern.match("p.chunks") and pattern.match("p.chunks.eu")
    for name in ("p.chunks.results", "p.results", "p.chunks.eu.x"):
        assert not pattern.match(name), name
    # "chunks" is no region: p.results.chunks is not a reply topic.
    assert not re.match(topics.results_pattern, "p.results.chunks")


def test_the_all_regions_pattern_takes_reply_topics_only() -> None:
    pattern = re.compile(TopicNames("p").results_pattern)
    for name in ("p.results", "p.results.eu", "p.results.retry-eu"):
        assert pattern.match(name), name
    # Another pipeline's topics (prefix "p.results"), look-alikes and nested names are not replies.
    for name in (
        "p.results.retry",
        "p.results.dlq",
        "p.results.results",
        "p.results.requests",
        "p.results.requests.high",
        "p.resultsx",
        "pxresults",
        "p.results.",
        "p.results.EU",
        "q.results.eu",
        "xp.results",
    ):
        assert not pattern.match(name), name


def test_topics_create_refuses_a_bad_region_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    # No broker listens on port 1: a connection attempt would fail differently, and slowly.
    code = main(["topics", "create", "--region", "eu", "--region", "Bad.Region"])
    assert code == 2
    assert "--region Bad.Region" in capsys.readouterr().out


# --- a regional ingest --------------------------------------------------------------------------------


def accepted(settings: IngestSettings, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    producer = RecordingProducer()
    app = create_app(settings, producer=producer, check_topics=False, backlog=FakeBacklog())
    with TestClient(app) as client:
        response = client.post("/v1/requests", content=json.dumps(body).encode(), headers=headers or {})
    if response.status_code != 202:
        return response
    (sent,) = producer.sent
    return request_codec().decode(sent[1])


def test_a_regional_ingest_answers_on_its_regions_topic_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INFERQ_REGION", "eu")
    settings = IngestSettings()
    assert settings.default_reply_topic == "inferq.results.eu"

    record: InferenceRequest = accepted(settings, CHAT)
    assert (record.reply_to, record.origin_region) == ("inferq.results.eu", "eu")
    explicit: InferenceRequest = accepted(settings, CHAT | {"reply_to": "inferq.results"})
    assert explicit.reply_to == "inferq.results"


def test_without_a_region_requests_name_no_reply_topic() -> None:
    settings = IngestSettings()
    record: InferenceRequest = accepted(settings, CHAT)
    assert (record.reply_to, record.origin_region) == (None, "local")
    assert settings.default_reply_topic == "inferq.results"


def test_the_older_ingest_region_variable_still_names_the_region(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERQ_INGEST_REGION", "us")
    assert IngestSettings().default_reply_topic == "inferq.results.us"


@pytest.mark.parametrize("region", ["EU", "retry", "eu.west", "x" * 40])
def test_an_ingest_refuses_a_region_that_names_no_reply_topic(
    monkeypatch: pytest.MonkeyPatch, region: str
) -> None:
    monkeypatch.setenv("INFERQ_REGION", region)
    with pytest.raises(ValueError, match="region"):
        IngestSettings()


def test_every_tenant_may_be_answered_on_its_ingests_region_but_not_on_another(tmp_path: Path) -> None:
    plain = TenantSpec("plain")  # no reply_topics entitled
    path = write_tenants(tmp_path / "tenants.toml", plain)
    settings = IngestSettings(
        region="eu", tenants=TenancySettings(file=path), kafka=KafkaSettings(topic_prefix="inferq")
    )

    record: InferenceRequest = accepted(settings, CHAT, plain.headers())
    assert record.reply_to == "inferq.results.eu"
    other = accepted(settings, CHAT | {"reply_to": "inferq.results.us"}, plain.headers())
    assert other.status_code == 403
    assert [p["field"] for p in other.json()["problems"]] == ["reply_to"]


# --- which topics a results service serves -----------------------------------------------------------


def test_a_results_service_serves_one_region_or_all_in_a_group_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    default = ResultsSettings()
    assert (default.reply_topics, default.consumer_group) == (["inferq.results"], "inferq-results")
    eu = ResultsSettings(region="eu")
    assert (eu.reply_topics, eu.consumer_group) == (["inferq.results.eu"], "inferq-results-eu")
    everything = ResultsSettings(region="all")
    assert (everything.reply_topics, everything.consumer_group) == (["inferq.results"], "inferq-results-all")
    monkeypatch.setenv("INFERQ_RESULTS_REGION", "us")
    monkeypatch.setenv("INFERQ_RESULTS_GROUP_ID", "mine")
    us = ResultsSettings()
    assert (us.reply_topics, us.consumer_group) == (["inferq.results.us"], "mine-us")


@pytest.mark.parametrize("region", ["ALL", "EU", "dlq", "eu.west"])
def test_results_refuses_a_region_that_is_neither_a_region_nor_all(
    region: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["results", "--region", region]) == 2
    assert "region" in capsys.readouterr().err
