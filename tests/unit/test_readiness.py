"""``/readyz`` (may this process take traffic now?) apart from ``/healthz`` (does it work?): the
background Kafka check it reads, and each service's answer, with no broker (fakes in its place)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import create_app as create_ingest
from inferq.ingest.settings import IngestSettings
from inferq.messaging.errors import MessagingError, MissingTopicsError
from inferq.messaging.readiness import TopicsWatch
from inferq.results.app import create_app as create_results
from inferq.results.settings import ResultsSettings
from tests.support.fakes import FakeBacklog, FakeResultFeed, GatedFeed, RecordingProducer
from tests.support.loop import in_loop
from tests.support.waiting import wait_until


class SwitchableKafka:
    """The topic check of a broker the test breaks and mends: raises what `failure` says."""

    def __init__(self) -> None:
        self.failure: Exception | None = None
        self.checks = 0

    def __call__(self) -> None:
        self.checks += 1
        if self.failure is not None:
            raise self.failure


def missing(*topics: str) -> MissingTopicsError:
    return MissingTopicsError(list(topics), "kafka.internal:9092")


@in_loop
async def test_the_watch_reports_the_last_check_and_never_an_address():
    kafka = SwitchableKafka()
    watch = TopicsWatch(kafka, interval_s=3600)

    seen = [watch.problem()]
    await watch.check_once()
    seen.append(watch.problem())
    kafka.failure = missing("p.requests.high", "p.results")
    await watch.check_once()
    seen.append(watch.problem())
    kafka.failure = MessagingError("Kafka at kafka.internal:9092 did not answer within 5 s")
    await watch.check_once()
    seen.append(watch.problem())
    kafka.failure = None
    await watch.check_once()
    seen.append(watch.problem())
    assert seen == [
        "kafka not checked yet",
        None,
        "topics missing: p.requests.high, p.results",
        "kafka unreachable",
        None,
    ]


def test_a_watch_told_of_the_start_up_check_is_ready_without_asking_kafka_again():
    kafka = SwitchableKafka()
    watch = TopicsWatch(kafka, interval_s=3600)

    async def scenario() -> str | None:
        watch.passed()
        await watch.start()
        await asyncio.sleep(0)
        try:
            return watch.problem()
        finally:
            await watch.stop()

    assert asyncio.run(scenario()) is None
    assert kafka.checks == 0


def ingest_app(kafka: SwitchableKafka) -> Any:
    return create_ingest(
        IngestSettings(),
        producer=RecordingProducer([]),
        check_topics=False,
        backlog=FakeBacklog([]),
        topics_check=kafka,
    )


def test_ingest_is_not_ready_while_a_topic_is_missing_and_stays_alive(monkeypatch):
    monkeypatch.setenv("INFERQ_READY_CHECK_INTERVAL_S", "0.02")
    kafka = SwitchableKafka()
    with TestClient(ingest_app(kafka)) as client:
        wait_until(lambda: client.get("/readyz").status_code, "ready", done=lambda v: v == 200)
        assert client.get("/readyz").json() == {"status": "ready"}
        kafka.failure = missing("inferq.requests.high")
        answer = wait_until(lambda: client.get("/readyz"), "not ready", done=lambda r: r.status_code == 503)
        assert answer.json() == {"status": "not ready", "reasons": ["topics missing: inferq.requests.high"]}
        assert client.get("/healthz").status_code == 200  # liveness: the process still works
        kafka.failure = None
        wait_until(lambda: client.get("/readyz").status_code, "ready again", done=lambda v: v == 200)


def test_ingest_is_not_ready_when_kafka_does_not_answer(monkeypatch):
    monkeypatch.setenv("INFERQ_READY_CHECK_INTERVAL_S", "300")
    kafka = SwitchableKafka()
    kafka.failure = MessagingError("Kafka at 10.0.0.7:9092 did not answer within 5 s")
    with TestClient(ingest_app(kafka)) as client:
        answer = wait_until(lambda: client.get("/readyz"), "a check", done=lambda r: r.status_code != 200)
    assert answer.status_code == 503
    assert answer.json()["reasons"] == ["kafka unreachable"]
    assert "10.0.0.7" not in answer.text


def test_results_is_not_ready_until_its_consumer_is_assigned(tmp_path):
    feed = GatedFeed()
    app = create_results(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: feed)
    with TestClient(app) as client:
        answer = client.get("/readyz")
        assert answer.status_code == 503
        assert answer.json() == {"status": "not ready", "reasons": ["not caught up with the reply topic yet"]}
        assert client.get("/healthz").status_code == 200  # starting is alive
        feed.gate.set()
        wait_until(lambda: client.get("/readyz").status_code, "ready", done=lambda v: v == 200)
        assert client.get("/readyz").json() == {"status": "ready"}


def test_results_with_a_dead_consumer_is_neither_ready_nor_alive(tmp_path, caplog):
    class DyingFeed(FakeResultFeed):
        async def getmany(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire")

    app = create_results(
        ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: DyingFeed()
    )
    with TestClient(app) as client:
        wait_until(lambda: client.get("/healthz").status_code, "dead", done=lambda v: v == 503)
        answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["reasons"] == ["consumer stopped"]


@pytest.mark.parametrize(
    ("in_group", "kafka_problem", "status", "reasons"),
    [
        (True, None, 200, None),
        (False, None, 503, ["not in the consumer group (joining or rebalancing)"]),
        (True, "kafka unreachable", 503, ["kafka unreachable"]),
    ],
)
def test_the_dispatcher_is_ready_in_its_group_with_kafka_answering(in_group, kafka_problem, status, reasons):
    from inferq.dispatcher.process import metrics_app

    class Member:
        def health(self) -> dict[str, object]:
            return {"assigned": 0}

        def ready_problems(self) -> list[str]:
            return [] if in_group else ["not in the consumer group (joining or rebalancing)"]

    kafka = SwitchableKafka()
    watch = TopicsWatch(kafka, interval_s=3600)
    if kafka_problem is None:
        watch.passed()
    else:
        kafka.failure = MessagingError("no answer")
        asyncio.run(watch.check_once())
    with TestClient(metrics_app(Member(), watch)) as client:  # type: ignore[arg-type]
        answer = client.get("/readyz")
        assert client.get("/healthz").status_code == 200
    assert answer.status_code == status
    assert answer.json().get("reasons") == reasons
