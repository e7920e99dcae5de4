"""Standard Webhooks on real deliveries (issue 23, item 5): ingest, dispatcher, results and the
simulated backend as processes on the real broker, a tenants file, a local receiver, and the
maintained verifier (`standardwebhooks.Webhook`) as a receiver would run it.

Before: ``Inferq-Signature`` (hex, over ``timestamp.body``, keyed by the secret's text) left the
delivery id unsigned, and Standard Webhooks verifiers refused every delivery. Now a tenant rotating
its secret has two: each verifies its real deliveries; a delivery replayed with another body,
another id, or later than the tolerance is refused; another tenant's secret verifies nothing; a
bad ``INFERQ_WEBHOOK_SECRET`` stops the service at start without quoting it; no secret reaches a
log line or a dead letter.

On the same pipeline, item 6's ``/metrics``: it names the tenants, so ingest and the results service
serve it on a port of their own; their API ports answer 404 for it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, ClassVar

import httpx
import pytest
from standardwebhooks import Webhook, WebhookVerificationError
from standardwebhooks import webhooks as standard

from inferq.tenancy.secret_forms import new_webhook_secret, webhook_key
from inferq.tools.stack.pipeline import Pipeline
from tests.hostile.conftest import HostileFigures
from tests.support.kafka import read_all
from tests.support.tenants import TenantSpec
from tests.support.webhook_receiver import Delivery, Receiver, webhook_pipeline, webhook_receiver

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

NEW = new_webhook_secret()
OLD = new_webhook_secret()
BETA = new_webhook_secret()
# Short, so a receiver that always fails yields a dead letter within the test.
RETRY_PERIOD_S = 3


class Stack:
    def __init__(self, pipeline: Pipeline, receiver: Receiver, acme: TenantSpec, beta: TenantSpec) -> None:
        self.pipeline, self.receiver, self.acme, self.beta = pipeline, receiver, acme, beta

    def delivered(self, path: str, spec: TenantSpec | None = None, text: str = "hello") -> Delivery:
        """The first delivery of a new request's outcome to `path` (answered 200)."""
        response = httpx.post(
            f"{self.pipeline.ingest_url}/v1/requests",
            json={
                "scenario": "realtime_chat",
                "messages": [{"role": "user", "content": text}],
                "callback_url": self.receiver.url(path),
            },
            headers=(spec or self.acme).headers(),
            timeout=10,
        )
        assert response.status_code == 202, response.text
        return self.receiver.wait_for(path, status=200)[0]


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work_dir = tmp_path_factory.mktemp("stdwh")
    with webhook_receiver() as receiver:
        hosts = {"callback_hosts": [f"127.0.0.1:{receiver.port}"]}
        # acme is rotating: the new secret first, the old one second; beta has one of its own.
        acme = TenantSpec("acme", extra={"webhook_secret": [NEW, OLD]}, entitlements=hosts)
        beta = TenantSpec("beta", extra={"webhook_secret": BETA}, entitlements=hosts)
        with webhook_pipeline(
            kafka_bootstrap, work_dir, acme, beta, name="stdwh", retry_period_s=RETRY_PERIOD_S
        ) as pipeline:
            yield Stack(pipeline, receiver, acme, beta)


def verify(secret: str, body: bytes, headers: dict[str, str]) -> Any:
    return Webhook(secret).verify(body, headers)


def test_each_of_a_rotating_tenants_two_secrets_verifies_its_real_deliveries(
    stack: Stack, hostile_figures: HostileFigures
) -> None:
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    delivery = stack.delivered(path)
    hostile_figures.tried("standard webhooks: real deliveries verified", 3)
    entries = delivery.headers["webhook-signature"].split(" ")
    assert len(entries) == 2 and all(e.startswith("v1,") for e in entries)
    uuid.UUID(delivery.headers["webhook-id"])
    assert "inferq-signature" not in delivery.headers and "inferq-delivery" not in delivery.headers
    for secret in (NEW, OLD):
        assert verify(secret, delivery.body, delivery.headers)["status"] == "OK"
    with pytest.raises(WebhookVerificationError):
        verify(BETA, delivery.body, delivery.headers)  # another tenant's secret


def test_a_tenant_with_one_secret_signs_once_and_its_secret_verifies_nothing_of_another(
    stack: Stack, hostile_figures: HostileFigures
) -> None:
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    delivery = stack.delivered(path, stack.beta)
    hostile_figures.tried("standard webhooks: another tenant's secret", 3)
    assert delivery.headers["webhook-signature"].count("v1,") == 1
    assert verify(BETA, delivery.body, delivery.headers)["status"] == "OK"
    for secret in (NEW, OLD):
        with pytest.raises(WebhookVerificationError, match="No matching signature"):
            verify(secret, delivery.body, delivery.headers)


class _Later(datetime):
    """The verifier's clock, six minutes on: the same delivery replayed past the 5-minute tolerance."""

    shift: ClassVar[timedelta] = timedelta(minutes=6)

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.now(tz) + cls.shift


@pytest.mark.parametrize(
    ("replay", "why"),
    [
        ("another body", "No matching signature"),
        ("another request's body", "No matching signature"),
        ("a fresh id", "No matching signature"),
        ("another delivery's id", "No matching signature"),
        ("a fresh timestamp", "No matching signature"),
        ("six minutes later", "too old"),
        ("another tenant's signature", "No matching signature"),
        ("no signature", "Missing required headers"),
    ],
)
def test_a_real_delivery_replayed_with_a_change_is_refused(
    stack: Stack, hostile_figures: HostileFigures, monkeypatch: pytest.MonkeyPatch, replay: str, why: str
) -> None:
    delivery = stack.delivered(f"/ok/{uuid.uuid4().hex[:8]}")
    headers, body = dict(delivery.headers), delivery.body
    assert verify(NEW, body, headers) is not None  # the delivery as it came verifies
    hostile_figures.tried("standard webhooks: a replayed delivery changed")
    if replay == "another body":
        body = json.dumps(json.loads(body) | {"output": "pay the attacker"}).encode()
    elif replay == "another request's body":
        body = stack.delivered(f"/ok/{uuid.uuid4().hex[:8]}", text="another").body
    elif replay == "a fresh id":  # past the receiver's deduplication
        headers["webhook-id"] = str(uuid.uuid4())
    elif replay == "another delivery's id":
        headers["webhook-id"] = stack.delivered(f"/ok/{uuid.uuid4().hex[:8]}").headers["webhook-id"]
    elif replay == "a fresh timestamp":  # past the tolerance check
        headers["webhook-timestamp"] = str(int(headers["webhook-timestamp"]) + 400)
        monkeypatch.setattr(standard, "datetime", _Later)
    elif replay == "six minutes later":
        monkeypatch.setattr(standard, "datetime", _Later)
    elif replay == "another tenant's signature":
        other = stack.delivered(f"/ok/{uuid.uuid4().hex[:8]}", stack.beta)
        headers["webhook-signature"] = other.headers["webhook-signature"]
    else:
        del headers["webhook-signature"]
    with pytest.raises(WebhookVerificationError, match=why):
        verify(NEW, body, headers)
    with pytest.raises(WebhookVerificationError, match=why):
        verify(OLD, body, headers)


def secret_forms(*secrets: str) -> list[bytes]:
    """Every form a secret could leak in: its text, its base64 part, its key (raw and base64)."""
    forms: list[bytes] = []
    for secret in secrets:
        key = webhook_key(secret)
        forms += [secret.encode(), secret.removeprefix("whsec_").encode(), key, base64.b64encode(key)]
    return forms


def test_no_secret_reaches_a_dead_letter_or_a_log_line(stack: Stack, hostile_figures: HostileFigures) -> None:
    path = f"/down/{uuid.uuid4().hex[:8]}"
    response = httpx.post(
        f"{stack.pipeline.ingest_url}/v1/requests",
        json={
            "scenario": "realtime_chat",
            "messages": [{"role": "user", "content": "x"}],
            "callback_url": stack.receiver.url(path),
        },
        headers=stack.acme.headers(),
        timeout=10,
    )
    request_id = response.json()["request_id"]
    attempts = stack.receiver.wait_for(path, count=2)
    hostile_figures.tried("standard webhooks: secrets in dead letters and logs")
    [letter] = [
        m
        for m in read_all(
            stack.pipeline.bootstrap,
            f"{stack.pipeline.topic_prefix}.dlq",
            until=lambda found: any(
                dict(m.headers() or []).get("inferq.request_id") == request_id.encode() for m in found
            ),
            timeout_s=60,
        )
        if dict(m.headers() or []).get("inferq.request_id") == request_id.encode()
    ]
    headers = dict(letter.headers() or [])
    assert headers["inferq.webhook.delivery_id"].decode() == attempts[0].headers["webhook-id"]
    letter_bytes = (letter.value() or b"") + b"".join(headers.values())
    logs = b"".join(p.read_bytes() for p in (stack.pipeline.work_dir / "logs").glob("*.log"))
    for form in secret_forms(NEW, OLD, BETA):
        assert form not in letter_bytes
        assert form not in logs


@pytest.mark.parametrize(
    "value",
    [
        "a-raw-secret-as-before-0123456789abcdef",  # the old form: used raw
        "whsec_" + base64.b64encode(b"only sixteen b!!").decode(),  # too short a key
        "whsec_replace-me-with-inferq-tenants-webhook-secret-output",  # the example's placeholder
    ],
)
def test_a_bad_open_mode_secret_stops_the_service_at_start_naming_the_variable_not_the_value(
    stack: Stack, hostile_figures: HostileFigures, value: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERQ_")}
    env |= {"INFERQ_WEBHOOK_SECRET": value, "INFERQ_RESULTS_DB_PATH": str(stack.pipeline.work_dir / "x.db")}
    hostile_figures.tried("standard webhooks: a bad INFERQ_WEBHOOK_SECRET")
    for service in ("ingest", "results"):
        done = subprocess.run(
            [sys.executable, "-m", "inferq", service, "--port", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert "INFERQ_WEBHOOK_SECRET" in done.stderr
        assert value not in done.stderr and value.removeprefix("whsec_")[:12] not in done.stderr


def test_metrics_name_the_tenants_on_their_own_port_and_the_api_ports_answer_404(
    stack: Stack, hostile_figures: HostileFigures
) -> None:
    stack.delivered(f"/ok/{uuid.uuid4().hex[:8]}", stack.beta)  # beta has a volume to show
    hostile_figures.tried("metrics: /metrics on the API ports", 2)
    for api in (stack.pipeline.ingest_url, stack.pipeline.results_url):
        assert httpx.get(f"{api}/metrics", headers=stack.acme.headers(), timeout=10).status_code == 404
    ingest = httpx.get(f"{stack.pipeline.ingest_metrics_url}/metrics", timeout=10)
    results = httpx.get(f"{stack.pipeline.results_metrics_url()}/metrics", timeout=10)
    assert ingest.status_code == results.status_code == 200
    assert 'tenant="beta"' in ingest.text
    assert "inferq_webhook_deliveries_total" in results.text
