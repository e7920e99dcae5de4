"""Hostile cases of the tenant fields: the Authorization header (missing, twice, huge, not ASCII,
whitespace inside, a hash instead of a key, another tenant's key), the body's `tenant` and the
results' ``?tenant=`` (too long, wrong type, not ASCII, another tenant's), against ingest and results
in-process and over raw sockets on the real server. Never a 5xx, never a write for a refusal, never
another tenant's data, never a key or a hash in an answer or a log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import create_app as create_ingest
from inferq.ingest.settings import IngestSettings
from inferq.messaging.codec import request_codec, result_codec
from inferq.messaging.records import InferenceResult
from inferq.results.app import create_app as create_results
from inferq.results.settings import ResultsSettings
from inferq.serving import HttpLimits
from inferq.tenancy.errors import TenantsFileError
from inferq.tenancy.keys import hash_key
from inferq.tenancy.registry import TenantRegistry
from inferq.tenancy.settings import TenancySettings
from tests.hostile.conftest import HostileFigures
from tests.hostile.test_http_server import Conversation, note, serving, status_of
from tests.support.fakes import FakeBacklog, FakeResultFeed, RecordingProducer, result_record
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

ACME = TenantSpec(
    "acme", max_tier="MEDIUM", scenarios=["realtime_chat"], extra={"requests_per_minute": 1_000}
)
BETA = TenantSpec("beta")
CHAT: dict[str, Any] = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}
SECRETS = (ACME.key, BETA.key, hash_key(ACME.key)[7:], hash_key(BETA.key)[7:])


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, "a key or a key hash leaked"


class Services:
    def __init__(
        self, ingest: TestClient, results: TestClient, producer: RecordingProducer, figures: HostileFigures
    ):
        self.ingest = ingest
        self.results = results
        self.producer = producer
        self.figures = figures
        self.answers: list[str] = []

    def post(self, area: str, body: Any, headers: Any = None) -> Any:
        sent = len(self.producer.sent)
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = self.ingest.post("/v1/requests", content=raw, headers=headers or {})
        self._note(area, response.status_code, response.text)
        if response.status_code != 202:
            assert len(self.producer.sent) == sent, "a refused request was written"
        return response

    def get(self, area: str, path: str, headers: Any = None, params: Any = None) -> Any:
        response = self.results.get(path, headers=headers or {}, params=params)
        self._note(area, response.status_code, response.text)
        return response

    def _note(self, area: str, status: int, text: str) -> None:
        self.figures.tried(f"http tenants: {area}")
        if status >= 500:
            self.figures.server_errors += 1
        assert status < 500, text[:300]
        self.answers.append(text)


@pytest.fixture
def services(tmp_path: Path, hostile_figures: HostileFigures) -> Iterator[Services]:
    path = write_tenants(tmp_path / "tenants.toml", ACME, BETA)
    tenancy = TenancySettings(file=path)
    producer, feed = RecordingProducer(), FakeResultFeed()
    ingest = create_ingest(
        IngestSettings(tenants=tenancy), producer=producer, check_topics=False, backlog=FakeBacklog()
    )
    results = create_results(
        ResultsSettings(db_path=tmp_path / "r.db", tenants=tenancy), check_topics=False, feed=lambda: feed
    )
    codec = result_codec()
    with TestClient(ingest) as i, TestClient(results) as r:
        feed.push(
            [
                codec.encode(
                    InferenceResult.from_record(
                        result_record("shared") | {"tenant": t, "output": f"{t} says"}
                    )
                )
                for t in ("acme", "beta")
            ]
        )
        both = Services(i, r, producer, hostile_figures)
        wait_until(
            lambda: r.get("/v1/requests/shared", headers=ACME.headers()).status_code,
            "the results stored",
            done=lambda v: v == 200,
        )
        yield both
        for answer in both.answers:
            assert_no_secret(answer)


AUTHORIZATIONS: list[tuple[str, Any]] = [
    ("missing", None),
    ("empty", b""),
    ("scheme only", b"Bearer"),
    ("basic", b"Basic " + ACME.key.encode()),
    ("10 KB", b"Bearer " + b"A" * 10_240),
    ("10 KB of a key's prefix", b"Bearer " + ACME.key.encode() * 220),
    ("utf-8 in the key", ("Bearer " + ACME.key[:-1] + "é").encode()),
    ("latin-1 in the key", b"Bearer " + ACME.key.encode() + b"\xe9"),
    ("nbsp after the scheme", b"Bearer\xc2\xa0" + ACME.key.encode()),
    ("space inside the key", b"Bearer " + ACME.key[:10].encode() + b" " + ACME.key[10:].encode()),
    ("tab inside the key", b"Bearer " + ACME.key[:10].encode() + b"\t" + ACME.key[10:].encode()),
    ("two keys", b"Bearer " + ACME.key.encode() + b" " + BETA.key.encode()),
    ("key and padding", b"Bearer " + ACME.key.encode() + b"="),
    ("the hash, not the key", b"Bearer " + hash_key(ACME.key).encode()),
    ("the hash's hex", b"Bearer " + hash_key(ACME.key)[7:].encode()),
    ("a truncated key", b"Bearer " + ACME.key[:-1].encode()),
    ("quoted key", b'Bearer "' + ACME.key.encode() + b'"'),
    ("NUL in the key", b"Bearer " + ACME.key.encode() + b"\x00"),
]


@pytest.mark.parametrize(("area", "value"), AUTHORIZATIONS, ids=[a for a, _ in AUTHORIZATIONS])
def test_an_authorization_that_is_not_one_valid_key_is_401_at_ingest_and_results(services, area, value):
    headers = {} if value is None else {"authorization": value}
    posted = services.post(f"authorization {area}", CHAT, headers)
    read = services.get(f"authorization {area}", "/v1/requests/shared", headers)
    assert posted.status_code == read.status_code == 401
    assert posted.json()["error"] and read.json()["error"]


def test_two_authorization_headers_are_401_even_when_both_are_valid(services):
    headers = [("authorization", f"Bearer {ACME.key}"), ("authorization", f"Bearer {ACME.key}")]
    assert services.post("authorization twice", CHAT, headers).status_code == 401
    assert services.get("authorization twice", "/v1/requests/shared", headers).status_code == 401


def test_surrounding_spaces_and_the_schemes_case_are_accepted(services):
    for value in (f"  Bearer {ACME.key}  ", f"bearer {ACME.key}", f"BEARER   {ACME.key}"):
        assert services.post("authorization spelling", CHAT, {"authorization": value}).status_code == 202


TENANT_FIELDS: list[tuple[str, Any, int]] = [
    ("too long", "a" * 65, 422),
    ("10 KB", "a" * 10_240, 422),
    ("empty", "", 422),
    ("number", 7, 422),
    ("null", None, 422),
    ("list", ["acme"], 422),
    ("object", {"name": "acme"}, 422),
    ("utf-8", "acmé", 422),
    ("homoglyph", "\u0430cme", 422),  # a Cyrillic a
    ("trailing newline", "acme\n", 422),
    ("another tenant", "beta", 403),
    ("default", "default", 403),
    ("its own", "acme", 202),
]


@pytest.mark.parametrize(("area", "value", "status"), TENANT_FIELDS, ids=[a for a, _, _ in TENANT_FIELDS])
def test_the_body_tenant_is_the_keys_or_refused(services, area, value, status):
    response = services.post(f"body tenant {area}", CHAT | {"tenant": value}, ACME.headers())
    assert response.status_code == status, response.text
    if status == 202:
        assert request_codec().decode(services.producer.sent[-1][1]).tenant == "acme"
    elif isinstance(value, str) and len(value) > 8:
        assert value not in response.text  # not echoed


QUERY_TENANTS: list[tuple[str, Any, int]] = [
    ("too long", "a" * 65, 422),
    ("10 KB", "a" * 10_240, 422),
    ("empty", "", 422),
    ("utf-8", "acmé", 422),
    ("twice", ["acme", "acme"], 422),
    ("another tenant", "beta", 403),
    ("its own", "acme", 200),
]


@pytest.mark.parametrize(("area", "value", "status"), QUERY_TENANTS, ids=[a for a, _, _ in QUERY_TENANTS])
def test_the_results_tenant_parameter_is_the_keys_or_refused(services, area, value, status):
    params = [("tenant", v) for v in value] if isinstance(value, list) else {"tenant": value}
    response = services.get(f"query tenant {area}", "/v1/requests/shared", ACME.headers(), params)
    assert response.status_code == status
    if status == 200:
        assert response.json()["output"] == "acme says"
    elif len(str(value)) > 8:
        assert str(value) not in response.text


def test_a_tenant_never_reads_or_squats_anothers_request(services):
    assert services.get("cross tenant", "/v1/requests/shared", BETA.headers()).json()["output"] == "beta says"
    assert services.get("cross tenant", "/v1/requests/shared", ACME.headers()).json()["output"] == "acme says"
    body = CHAT | {"request_id": "victim-123"}
    assert services.post("cross tenant", body, ACME.headers()).json()["duplicate"] is False
    assert services.post("cross tenant", body, BETA.headers()).json()["duplicate"] is False


def test_the_real_server_answers_raw_hostile_authorization_headers_below_500(
    services, hostile_figures, tmp_path
):
    path = write_tenants(tmp_path / "t2.toml", ACME, BETA)
    app = create_ingest(
        IngestSettings(tenants=TenancySettings(file=path)),
        producer=RecordingProducer(),
        check_topics=False,
        backlog=FakeBacklog(),
    )
    body = json.dumps(CHAT).encode()
    values = [
        b"Bearer " + b"A" * 10_240,  # 10 KB: under the 16 KB header bound, refused by the parse
        b"Bearer " + ACME.key.encode() + b"\xff\xfe",
        b"Bearer \xe2\x80\x8b" + ACME.key.encode(),  # a zero-width space
        b"Bearer " + ACME.key.encode() + b" \x01",
    ]
    with serving(app, HttpLimits()) as port:
        for value in values:
            talk = Conversation(port)
            talk.send(
                b"POST /v1/requests HTTP/1.1\r\nhost: ingest\r\ncontent-type: application/json\r\n"
                + b"content-length: %d\r\nauthorization: " % len(body)
                + value
                + b"\r\nconnection: close\r\n\r\n"
                + body
            )
            _, received, _ = talk.answer()
            status = status_of(received)
            note(hostile_figures, status, "http tenants: raw authorization")
            assert status in {400, 401}, received[:300]
            assert_no_secret(received.decode("latin-1"))


def test_no_key_or_hash_reaches_a_log_line_on_any_tenant_path(tmp_path, caplog, hostile_figures):
    caplog.set_level(logging.DEBUG)
    path = write_tenants(tmp_path / "tenants.toml", ACME, BETA)
    app = create_ingest(
        IngestSettings(tenants=TenancySettings(file=path, reload_interval_s=0.05)),
        producer=RecordingProducer(),
        check_topics=False,
        backlog=FakeBacklog(),
    )
    results = create_results(
        ResultsSettings(db_path=tmp_path / "r.db", tenants=TenancySettings(file=path)),
        check_topics=False,
        feed=FakeResultFeed,
    )
    with TestClient(results) as client:
        for headers in ({}, {"authorization": f"Bearer {ACME.key}x"}, ACME.headers(), BETA.headers()):
            for params in ({}, {"tenant": "beta"}, {"tenant": "acme"}):
                response = client.get("/v1/requests/r-1", headers=headers, params=params)
                hostile_figures.tried("http tenants: log paths")
                assert_no_secret(response.text)
    with TestClient(app) as client:
        for headers in (
            {},
            {"authorization": f"Bearer {ACME.key}x"},
            {"authorization": f"Bearer {hash_key(ACME.key)}"},
            {"authorization": f"Token {BETA.key}"},
            ACME.headers(),
        ):
            for body in (
                CHAT,
                CHAT | {"tenant": "beta"},
                CHAT | {"scenario": "batch"},
                CHAT | {"priority": "HIGH"},
            ):
                response = client.post("/v1/requests", json=body, headers=headers)
                hostile_figures.tried("http tenants: log paths")
                assert_no_secret(response.text)
        # A broken rewrite: a key pasted where its hash belongs, and a malformed hash.
        path.write_text(
            ACME.toml().replace(hash_key(ACME.key), ACME.key)
            + BETA.toml().replace(hash_key(BETA.key), hash_key(BETA.key)[:-1])
        )
        wait_until(lambda: "tenants file invalid" in caplog.text, "the invalid tenants file reported")
    logged = "\n".join(
        caplog.handler.format(r) for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))
    )
    assert "is a key, not its hash" in logged and "is not a key hash" in logged
    assert_no_secret(logged)
    assert hash_key(BETA.key)[7:-1] not in logged
    registry = TenantRegistry(path)
    with pytest.raises(TenantsFileError) as refused:
        registry.load()
    assert_no_secret(str(refused.value))
