"""No leaks: the logs of whole request paths, every logger at DEBUG, hold no prompt, no output, no
API key and no password, and ingest's 503 does not echo librdkafka; refused and failed paths
included (a 422, a 400, a 413, a 429, a refused and an unacknowledged produce, a poison result)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import create_app as create_ingest
from inferq.ingest.settings import IngestSettings
from inferq.messaging.codec import result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceResult
from inferq.results.app import create_app as create_results
from inferq.results.settings import ResultsSettings
from tests.support.fakes import (
    FakeBacklog,
    FakeResultFeed,
    SilentProducer,
    SwitchableProducer,
    result_record,
)
from tests.support.waiting import wait_until

PROMPT = "prompt-7c1e-my-diary-says-I-am-sad"
OUTPUT = "output-41b9-you-will-feel-better"
API_KEY = "sk-live-9d2f0c3b5a"
PASSWORD = "kafka-pass-58e1"  # noqa: S105 - a marker to look for, not a credential
SECRETS = (PROMPT, OUTPUT, API_KEY, PASSWORD)
LIBRDKAFKA = "Broker: Not enough in-sync replicas (10.1.2.3:9093/7)"


def chat(**fields: Any) -> dict[str, Any]:
    return {"scenario": "emotion_analysis", "messages": [{"role": "user", "content": PROMPT}]} | fields


def ingest_settings(**overrides: Any) -> IngestSettings:
    kafka = KafkaSettings(
        security_protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="svc", sasl_password=PASSWORD
    )
    return IngestSettings(kafka=kafka, **overrides)


def service_log(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured line and traceback, but the test's own HTTP client's (httpx logs its URLs)."""
    handler = caplog.handler
    return "\n".join(
        handler.format(r) for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))
    )


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked"


def test_ingest_logs_and_answers_hold_no_prompt_key_password_or_librdkafka_text(caplog, hostile_figures):
    caplog.set_level(logging.DEBUG)
    producer = SwitchableProducer(reason=LIBRDKAFKA)
    backlog = FakeBacklog()
    app = create_ingest(ingest_settings(), producer=producer, check_topics=False, backlog=backlog)
    answers: list[str] = []
    headers = {"authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY}
    with TestClient(app) as client:

        def post(body: Any = None, raw: bytes | None = None) -> int:
            content = raw if raw is not None else json.dumps(body, ensure_ascii=False).encode()
            response = client.post(f"/v1/requests?api_key={API_KEY}", content=content, headers=headers)
            answers.append(response.text)
            return response.status_code

        statuses = [
            post(chat(request_id="r-1")),  # accepted
            post(chat(request_id="r-1")),  # replayed
            post(chat(estimated_tokens=2**31)),  # 422
            post(chat(params={"stream": True, "model": PROMPT})),  # 422 naming the key, not the value
            post(raw=b'{"messages": [{"content": "' + PROMPT.encode() + b'"'),  # 400
            post({"scenario": "x", "messages": [{"role": "user", "content": PROMPT + "é" * 500_000}]}),  # 413
        ]
        producer.refusing = True
        statuses.append(post(chat()))  # 503, librdkafka's reason in the log only
        producer.refusing = False
        backlog.lags = dict.fromkeys(backlog.lags, 10_000)  # type: ignore[arg-type]
        statuses.append(post(chat()))  # 429
    silent = create_ingest(
        ingest_settings(produce_timeout_s=0.05),
        producer=SilentProducer(),
        check_topics=False,
        backlog=FakeBacklog(),
    )
    with TestClient(silent) as client:
        response = client.post("/v1/requests", json=chat(), headers=headers)
        statuses.append(response.status_code)
        answers.append(response.text)
    hostile_figures.tried("http logs: ingest paths", len(statuses))
    assert statuses == [202, 202, 422, 422, 400, 413, 503, 429, 503]
    assert_no_secret(service_log(caplog))
    # A refusal may name a field, never repeat a value: not even the client's own prompt.
    for answer in answers:
        assert_no_secret(answer)
        assert "10.1.2.3" not in answer and "in-sync" not in answer
    assert "produce failed, answering 503" in service_log(caplog)  # the detail is for operators
    assert LIBRDKAFKA in service_log(caplog)


def test_results_logs_hold_no_output_even_of_a_poison_record(tmp_path, caplog, hostile_figures):
    caplog.set_level(logging.DEBUG)
    codec = result_codec()
    good = codec.encode(InferenceResult.from_record(result_record("r-ok") | {"output": OUTPUT}))
    # The same record with its output's last byte made invalid UTF-8: the decoder's own error quotes
    # the bytes around it.
    marked = codec.encode(InferenceResult.from_record(result_record("r-bad") | {"output": OUTPUT + "Z"}))
    poison = marked.replace(b"Z", b"\xff", 1)
    feed = FakeResultFeed()
    app = create_results(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=lambda: feed)
    with TestClient(app) as client:
        feed.push([poison, good])
        response = wait_until(
            lambda: client.get("/v1/requests/r-ok"),
            "the good result stored",
            done=lambda r: r.status_code == 200,
        )
        assert response.json()["output"] == OUTPUT
        assert client.get("/v1/requests/r-bad").status_code == 404
        client.get(f"/v1/requests/{OUTPUT}", headers={"authorization": f"Bearer {API_KEY}"})
    hostile_figures.tried("http logs: results paths", 4)
    assert "undecodable result" in caplog.text
    assert_no_secret(service_log(caplog))
