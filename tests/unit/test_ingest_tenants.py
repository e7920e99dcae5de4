"""Ingest with a tenants file, in-process: keys (401), the key's tenant (403 for another), request
ids scoped per tenant, entitlements (403, or lowered), requests per minute and the share of a tier's
backlog (429 for one tenant while another is admitted), and the counters per tenant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging.codec import request_codec
from inferq.messaging.records import InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.tenancy.settings import TenancySettings
from tests.support.clock import ManualClock
from tests.support.fakes import FakeBacklog, InMemoryMetrics, RecordingProducer, labels
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

NOW_MS = 1_700_000_000_000
CHAT: dict[str, Any] = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}
ACME = TenantSpec(
    "acme",
    max_tier="MEDIUM",
    scenarios=["realtime_chat", "emotion_analysis", "morning_brief"],
    extra={"requests_per_minute": 2},
    entitlements={
        "models": ["inferq-fast"],
        "max_estimated_tokens": 1_000,
        "max_deadline_ms": 20_000,
        "reply_topics": ["inferq.results.eu"],
    },
    params={"temperature": 1.0, "max_tokens": 256},
)
BETA = TenantSpec("beta", entitlements={"roles": ["user", "system"]}, params={"seed": True})
GAMMA = TenantSpec("gamma")


@dataclass
class Ingest:
    client: TestClient
    producer: RecordingProducer
    backlog: FakeBacklog
    clock: ManualClock
    metrics: InMemoryMetrics
    path: Path

    def post(self, body: Any, spec: TenantSpec | None = None, **headers: str) -> Any:
        all_headers = (spec.headers() if spec is not None else {}) | headers
        return self.client.post("/v1/requests", content=json.dumps(body).encode(), headers=all_headers)

    def accepted(self, body: Any, spec: TenantSpec) -> InferenceRequest:
        sent = len(self.producer.sent)
        response = self.post(body, spec)
        assert response.status_code == 202, response.text
        assert len(self.producer.sent) == sent + 1
        return request_codec().decode(self.producer.sent[-1][1])

    def refused(self, status: int, body: Any, spec: TenantSpec | None = None, **headers: str) -> Any:
        sent = len(self.producer.sent)
        response = self.post(body, spec, **headers)
        assert response.status_code == status, response.text
        assert len(self.producer.sent) == sent, "a refused request was written"
        return response


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[Ingest]:
    path = write_tenants(tmp_path / "tenants.toml", ACME, BETA, GAMMA)
    producer, backlog, clock, metrics = RecordingProducer(), FakeBacklog(), ManualClock(0), InMemoryMetrics()
    settings = IngestSettings(tenants=TenancySettings(file=path, reload_interval_s=0.05))
    app = create_app(
        settings,
        producer=producer,
        check_topics=False,
        backlog=backlog,
        clock_ms=lambda: NOW_MS,
        rate_clock_s=clock.seconds,
        metrics_meter=metrics.meter,
    )
    with TestClient(app) as client:
        yield Ingest(client, producer, backlog, clock, metrics, path)
    metrics.shutdown()


# --- keys -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({}, "missing Authorization header"),
        ({"authorization": "Bearer"}, "Authorization must be 'Bearer <key>'"),
        ({"authorization": "Token abc"}, "Authorization must be 'Bearer <key>'"),
        ({"authorization": "Bearer iq_thisisnotanykeyatall"}, "unknown API key"),
    ],
)
def test_without_a_valid_key_it_is_401_saying_why_and_nothing_is_read_or_written(ingest, headers, says):
    response = ingest.refused(401, CHAT, **headers)
    assert response.json() == {"error": response.json()["error"]}
    assert says in response.json()["error"]
    assert response.headers["www-authenticate"].startswith('Bearer realm="inferq"')
    # The body is never parsed for an unknown caller: not even a malformed one gets further.
    assert ingest.refused(401, "not even an object", **headers).json()["error"] == response.json()["error"]


def test_the_record_belongs_to_the_keys_tenant(ingest):
    assert ingest.accepted(CHAT, ACME).tenant == "acme"
    assert ingest.accepted(CHAT | {"tenant": "beta"}, BETA).tenant == "beta"
    other = ingest.refused(403, CHAT | {"tenant": "beta"}, ACME).json()
    assert other["problems"] == [
        {"field": "tenant", "problem": "this key belongs to tenant 'acme'; leave tenant out or send that"}
    ]


def test_the_same_request_id_from_two_tenants_is_two_requests(ingest):
    body = CHAT | {"request_id": "victim-123"}
    first = ingest.post(body, BETA).json()
    squat = ingest.post(body, ACME).json()
    again = ingest.post(body, ACME).json()
    victim = ingest.post(body, BETA).json()
    assert (first["duplicate"], squat["duplicate"], again["duplicate"], victim["duplicate"]) == (
        False,
        False,
        True,
        True,
    )
    records = [request_codec().decode(v) for _, v, _ in ingest.producer.sent]
    assert sorted((r.tenant, r.request_id) for r in records) == [
        ("acme", "victim-123"),
        ("beta", "victim-123"),
    ]


# --- entitlements ---------------------------------------------------------------------------------


def test_a_tier_above_the_tenants_is_lowered_with_its_topic(ingest):
    record = ingest.accepted(CHAT | {"priority": "HIGH"}, ACME)
    assert record.tier is Tier.MEDIUM
    assert ingest.producer.sent[-1][0] == "inferq.requests.medium"
    # The deadline is the lowered tier's (MEDIUM's 30 s, cut to acme's 20 s), not HIGH's 5 s.
    assert record.expire_at_ms == NOW_MS + 20_000
    assert ingest.post(CHAT, ACME).json()["tier"] == "MEDIUM"  # the answer says so too


def test_an_unknown_scenarios_high_is_capped_when_the_tenant_may_use_any_scenario(ingest):
    assert ingest.accepted({**CHAT, "scenario": "something-new"}, BETA).tier is Tier.HIGH
    capped = TenantSpec("capped", max_tier="LOW")
    write_tenants(ingest.path, ACME, BETA, GAMMA, capped)
    wait_until(
        lambda: ingest.post({**CHAT, "scenario": "something-new"}, capped).status_code,
        "the capped tenant, after the reload",
        done=lambda v: v == 202,
    )
    assert request_codec().decode(ingest.producer.sent[-1][1]).tier is Tier.LOW


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"scenario": "batch"}, "scenario"),
        ({"model": "inferq-accurate"}, "model"),
        ({"messages": [{"role": "system", "content": "obey"}]}, "messages.0.role"),
        ({"estimated_tokens": 1_001}, "estimated_tokens"),
        ({"deadline_ms": 20_001}, "deadline_ms"),
        ({"expire_at_ms": NOW_MS + 20_001}, "expire_at_ms"),
        ({"reply_to": "inferq.results.us"}, "reply_to"),
        ({"params": {"seed": 1}}, "params.seed"),
        ({"params": {"temperature": 1.5}}, "params.temperature"),
        ({"params": {"max_tokens": 257}}, "params.max_tokens"),
    ],
)
def test_what_the_tenant_is_not_entitled_to_is_403_naming_the_field(ingest, fields, field):
    answer = ingest.refused(403, CHAT | fields, ACME).json()
    assert [p["field"] for p in answer["problems"]] == [field]
    assert answer["error"].startswith("tenant 'acme' is not entitled to this request: ")


def test_the_global_rules_still_come_first_with_422(ingest):
    answer = ingest.refused(422, CHAT | {"params": {"stream": True}}, ACME).json()
    assert answer["problems"][0]["field"] == "params.stream"
    assert ingest.refused(422, CHAT | {"reply_to": "inferq.requests.high"}, ACME).json()["problems"][0][
        "field"
    ] == ("reply_to")


def test_what_the_tenant_is_entitled_to_is_accepted_and_caps_fill_in(ingest):
    record = ingest.accepted(
        CHAT
        | {
            "model": "inferq-fast",
            "estimated_tokens": 1_000,
            "reply_to": "inferq.results.eu",
            "params": {"temperature": 1.0},
        },
        ACME,
    )
    assert record.model == "inferq-fast" and record.reply_to == "inferq.results.eu"
    assert record.decoded_params() == {"temperature": 1.0, "max_tokens": 256}
    # A default deadline longer than the tenant's is cut to it: LOW's 12 h becomes 20 s.
    brief = ingest.accepted({**CHAT, "scenario": "morning_brief"}, ACME)
    assert brief.expire_at_ms == NOW_MS + 20_000
    assert ingest.accepted(CHAT | {"messages": [{"role": "system", "content": "s"}]}, BETA).tenant == "beta"


# --- quotas ---------------------------------------------------------------------------------------


def test_a_tenant_over_its_rate_gets_429_with_its_own_retry_after_while_another_is_admitted(ingest):
    ingest.accepted(CHAT, ACME)
    ingest.accepted(CHAT, ACME)
    refused = ingest.refused(429, CHAT, ACME)
    assert refused.headers["retry-after"] == "30"  # 2 a minute: the next token in 30 s
    assert refused.json() == {
        "error": "tenant 'acme' is over its quota of 2 requests per minute (burst 2); retry later",
        "quota": "requests_per_minute",
        "tenant": "acme",
        "limit": 2,
        "burst": 2,
        "retry_after_s": 30,
    }
    ingest.accepted(CHAT, BETA)  # no rate: never limited
    ingest.clock.advance(s=30)
    ingest.accepted(CHAT, ACME)


def test_a_tenant_over_its_share_of_a_half_full_tier_is_refused_while_another_is_admitted(ingest):
    # HIGH's capacity is 60; shares count from half full. Lately beta sent 9 of HIGH's requests and
    # gamma 1 (acme, capped at MEDIUM, none): beta and gamma split HIGH, 30 each.
    for _ in range(9):
        ingest.accepted(CHAT, BETA)
    ingest.accepted(CHAT, GAMMA)
    ingest.backlog.lags = {Tier.HIGH: 40, Tier.MEDIUM: 0, Tier.LOW: 0}
    refused = ingest.refused(429, CHAT, BETA)
    assert refused.json() == {
        "error": "tenant 'beta' is over its share of tier HIGH's backlog (about 36 of its 30, the tier "
        "holds 40 of 60); retry later",
        "quota": "tier_share",
        "tenant": "beta",
        "tier": "HIGH",
        "backlog_estimate": 36,
        "share": 30,
        "retry_after_s": 1,
    }
    assert refused.headers["retry-after"] == "1"
    ingest.accepted(CHAT, GAMMA)  # about 4 of its 30
    ingest.backlog.lags[Tier.HIGH] = 29  # under half full: anyone may use the room
    ingest.accepted(CHAT, BETA)
    ingest.backlog.lags[Tier.HIGH] = 60  # full: the tier's own refusal for the tenant over its share
    assert ingest.refused(429, CHAT, BETA).json()["capacity"] == 60
    ingest.accepted(CHAT, GAMMA)  # about 10 of its 30: the rest of its share stays its own
    ingest.backlog.lags[Tier.HIGH] = 100  # past the capacity plus gamma's unused share (60 + 7)
    assert ingest.refused(429, CHAT, GAMMA).json()["capacity"] == 60


def test_requests_and_refusals_are_counted_per_tenant_of_the_file(ingest):
    ingest.accepted(CHAT, ACME)
    ingest.accepted(CHAT, BETA)
    ingest.refused(401, CHAT)
    ingest.refused(403, CHAT | {"scenario": "batch"}, ACME)
    ingest.refused(403, CHAT | {"tenant": "made-up-by-the-caller"}, BETA)
    assert ingest.metrics.points("inferq_ingest_accepted_total") == {
        labels(tier="MEDIUM", tenant="acme"): 1,
        labels(tier="HIGH", tenant="beta"): 1,
    }
    assert ingest.metrics.points("inferq_ingest_refused_total") == {
        labels(reason="unauthenticated_missing"): 1,
        labels(reason="not_entitled", tenant="acme"): 1,
        labels(reason="not_entitled", tenant="beta"): 1,
    }


def test_the_backlog_view_needs_a_key(ingest):
    assert ingest.client.get("/v1/backlog").status_code == 401
    assert ingest.client.get("/v1/backlog", headers=BETA.headers()).status_code == 200
    assert ingest.client.get("/healthz").status_code == 200  # liveness stays open


def test_a_rotated_key_works_after_the_reload_and_the_removed_one_is_401(ingest):
    rotated = TenantSpec("beta", keys=[TenantSpec("x").key, BETA.key])
    write_tenants(ingest.path, ACME, rotated, GAMMA)
    wait_until(
        lambda: ingest.post(CHAT, rotated).status_code,
        "the rotated key, after the reload",
        done=lambda v: v == 202,
    )
    ingest.accepted(CHAT, BETA)  # the previous key too, until it is removed
    write_tenants(ingest.path, ACME, TenantSpec("beta", keys=[rotated.key]), GAMMA)
    wait_until(
        lambda: ingest.post(CHAT, BETA).status_code,
        "the removed key refused, after the reload",
        done=lambda v: v == 401,
    )
    ingest.accepted(CHAT, rotated)


def test_an_invalid_rewrite_keeps_the_tenants_in_force(ingest, caplog):
    ingest.path.write_text('[[tenants]]\nname = "acme"\nweight = 0\n')
    wait_until(lambda: "tenants file invalid" in caplog.text, "the invalid file reported, after the reload")
    ingest.accepted(CHAT, BETA)
