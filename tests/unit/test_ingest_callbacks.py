"""``callback_url`` at submission, in-process: accepted for a tenant's allowed public host, refused
with 422 naming the field (and nothing written) for everything else: a host the tenant does not
list (another tenant's included), a private address even when listed, a bad form, a wrong type."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging.codec import request_codec
from inferq.tenancy.settings import TenancySettings
from inferq.webhooks.settings import WebhookSettings
from tests.support.fakes import FakeBacklog, RecordingProducer
from tests.support.tenants import TenantSpec, write_tenants

SECRET = "whsec_Y2FsbGJhY2tzLXVuaXQtLS0tLS0tLS0tLS0tLS0tLS0="  # noqa: S105 - a test secret
CHAT: dict[str, Any] = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}
# Public addresses as literals: the test needs no DNS. 10.0.0.5 is listed to show the guard wins.
ACME = TenantSpec(
    "acme",
    extra={"webhook_secret": SECRET},
    entitlements={"callback_hosts": ["93.184.216.34", "10.0.0.5", "nowhere.invalid"]},
)
BETA = TenantSpec("beta", extra={"webhook_secret": SECRET}, entitlements={"callback_hosts": ["8.8.4.4"]})
UNSIGNED = TenantSpec("unsigned", entitlements={"callback_hosts": ["93.184.216.34"]})


class Ingest:
    def __init__(self, client: TestClient, producer: RecordingProducer) -> None:
        self.client, self.producer = client, producer

    def post(self, body: Any, spec: TenantSpec | None = None) -> Any:
        headers = spec.headers() if spec is not None else {}
        return self.client.post("/v1/requests", content=json.dumps(body).encode(), headers=headers)


def ingest_with(settings: IngestSettings) -> Iterator[Ingest]:
    producer = RecordingProducer()
    app = create_app(settings, producer=producer, check_topics=False, backlog=FakeBacklog())
    with TestClient(app) as client:
        yield Ingest(client, producer)


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[Ingest]:
    path = write_tenants(tmp_path / "tenants.toml", ACME, BETA, UNSIGNED)
    yield from ingest_with(IngestSettings(tenants=TenancySettings(file=path), webhooks=WebhookSettings()))


def test_an_allowed_public_callback_is_accepted_and_carried_on_the_record(ingest):
    url = "https://93.184.216.34/hooks/inferq?source=acme"
    response = ingest.post(CHAT | {"callback_url": url}, ACME)
    assert response.status_code == 202, response.text
    [(_, value, _)] = ingest.producer.sent
    assert request_codec().decode(value).callback_url == url


def test_without_a_callback_the_record_has_none(ingest):
    assert ingest.post(CHAT, ACME).status_code == 202
    assert request_codec().decode(ingest.producer.sent[0][1]).callback_url is None


@pytest.mark.parametrize(
    ("callback", "says"),
    [
        ("https://93.184.216.34/" + "a" * 2_100, "at most 2048 characters"),
        ("", "at least 1 character"),
        (123, "valid string"),
        (True, "valid string"),
        (["https://93.184.216.34/"], "valid string"),
        ({"url": "https://93.184.216.34/"}, "valid string"),
        ("http://93.184.216.34/hook", "scheme must be https"),
        ("ftp://93.184.216.34/hook", "scheme must be https"),
        ("javascript:alert(1)", "scheme must be https"),
        ("https://user:pw@93.184.216.34/hook", "credentials"),
        ("https://93.184.216.34/hook#x", "fragment"),
        ("https://evil.example/hook", "not among this tenant's callback_hosts"),
        ("https://8.8.4.4/hook", "not among this tenant's callback_hosts"),  # beta's host
        ("https://10.0.0.5/hook", "private address"),  # listed, but private
        ("https://1572395042/hook", "non-canonical"),  # 93.184.216.34 as a decimal number
        ("https://0x5db8d822/hook", "non-canonical"),
        ("https://127.0.0.1/hook", "not among"),
        ("https://[::1]/hook", "not among"),
        ("https://nowhere.invalid/hook", "does not resolve"),
    ],
)
def test_a_refused_callback_is_422_naming_the_field_and_nothing_is_written(ingest, callback, says):
    response = ingest.post(CHAT | {"callback_url": callback}, ACME)
    assert response.status_code == 422, response.text
    [problem] = response.json()["problems"]
    assert problem["field"] == "callback_url"
    assert says in problem["problem"]
    assert ingest.producer.sent == []


def test_a_tenant_without_a_webhook_secret_gets_no_webhooks(ingest):
    response = ingest.post(CHAT | {"callback_url": "https://93.184.216.34/hook"}, UNSIGNED)
    assert response.status_code == 422
    assert "no webhook secret" in response.json()["problems"][0]["problem"]
    assert SECRET not in response.text


@pytest.fixture
def open_ingest() -> Iterator[Ingest]:
    settings = IngestSettings(webhooks=WebhookSettings(callback_hosts=("93.184.216.34",), secret=SECRET))
    yield from ingest_with(settings)


def test_open_mode_uses_the_configured_hosts(open_ingest):
    assert open_ingest.post(CHAT | {"callback_url": "https://93.184.216.34/h"}).status_code == 202
    refused = open_ingest.post(CHAT | {"callback_url": "https://8.8.4.4/h"})
    assert refused.status_code == 422
    assert "INFERQ_CALLBACK_HOSTS" in refused.json()["problems"][0]["problem"]


def test_open_mode_without_a_secret_refuses_callbacks():
    settings = IngestSettings(webhooks=WebhookSettings(callback_hosts=("93.184.216.34",), secret=None))
    for ingest in ingest_with(settings):
        refused = ingest.post(CHAT | {"callback_url": "https://93.184.216.34/h"})
        assert refused.status_code == 422
        assert "INFERQ_WEBHOOK_SECRET" in refused.json()["problems"][0]["problem"]


def test_the_settings_read_the_documented_variables(monkeypatch):
    monkeypatch.setenv("INFERQ_CALLBACK_HOSTS", "Hooks.Example, hooks.example:8443")
    monkeypatch.setenv("INFERQ_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("INFERQ_WEBHOOK_RETRY_PERIOD_S", "90")
    settings = WebhookSettings()
    assert settings.callback_hosts == ("hooks.example", "hooks.example:8443")
    assert settings.retry_period_s == 90
    assert SECRET not in repr(settings) and settings.secret is not None


@pytest.mark.parametrize(
    "entry", ["https://hooks.example", "hooks.example/path", "user@hooks.example", "a b"]
)
def test_a_malformed_open_mode_host_stops_the_service_at_start(monkeypatch, entry):
    monkeypatch.setenv("INFERQ_CALLBACK_HOSTS", f"hooks.example,{entry}")
    with pytest.raises(ValueError, match="is not a host or host:port"):
        WebhookSettings()


# --- the callbacks' resolver: a tenant's lookups in flight are bounded ---------------------------

SLOW = TenantSpec(
    "slow",
    extra={"webhook_secret": SECRET},
    entitlements={"callback_hosts": ["slow.example"]},
    limits={"dns_lookups": 1},
)
FAST = TenantSpec("fast", extra={"webhook_secret": SECRET}, entitlements={"callback_hosts": ["fast.example"]})


def test_past_its_dns_lookups_a_submission_is_429_and_other_tenants_lookups_go_on(tmp_path, monkeypatch):
    """`slow`'s DNS hangs and it may have one lookup in flight: its next submission with a callback
    is 429 with Retry-After at once (not queued behind the hang), `fast`'s callback host resolves
    meanwhile, and once the hang ends `slow` is served again."""
    looking, release = threading.Event(), threading.Event()
    system = socket.getaddrinfo

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        if host in ("slow.example", "fast.example"):
            if host == "slow.example":
                looking.set()
                release.wait(30)
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))]
        return system(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    path = write_tenants(tmp_path / "tenants.toml", FAST, SLOW)
    settings = IngestSettings(tenants=TenancySettings(file=path), webhooks=WebhookSettings())
    try:
        for ingest in ingest_with(settings):
            with ThreadPoolExecutor(max_workers=1) as pool:
                first = pool.submit(ingest.post, CHAT | {"callback_url": "https://slow.example/a"}, SLOW)
                assert looking.wait(10)
                refused = ingest.post(CHAT | {"callback_url": "https://slow.example/b"}, SLOW)
                assert refused.status_code == 429, refused.text
                assert int(refused.headers["retry-after"]) >= 1
                assert refused.json()["quota"] == "dns_lookups" and refused.json()["limit"] == 1
                served = ingest.post(CHAT | {"callback_url": "https://fast.example/a"}, FAST)
                assert served.status_code == 202, served.text
                release.set()
                assert first.result(10).status_code == 202
            assert ingest.post(CHAT | {"callback_url": "https://slow.example/c"}, SLOW).status_code == 202
            assert len(ingest.producer.sent) == 3  # the refused one wrote nothing
    finally:
        release.set()
