"""Signed webhooks end to end: ingest, dispatcher, results and the simulated backend as processes on
the real broker, a tenants file, and a local receiver (allowed by the test-only settings for http
and loopback addresses).

A request with a callback gets exactly one delivered POST with a valid Standard Webhooks signature
(verified with the `standardwebhooks` package); a receiver that fails gets the same delivery again
after backoff; a results service killed with deliveries pending delivers them after its restart; a
receiver that always fails yields a dead letter once the retry period is over; submissions naming a
refused host or a private address are 422, and nothing is sent.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from inferq.tools.stack.pipeline import Pipeline
from inferq.tools.stack.process import ServiceProcess
from tests.support.inprocess import free_port
from tests.support.kafka import read_all
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until
from tests.support.webhook_receiver import Receiver, webhook_pipeline, webhook_receiver

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ACME_SECRET = "whsec_YWNtZS1lMmUtLS0tLS0tLS0tLS0tLS0tLS0tLS0tLS0="  # noqa: S105 - a test secret
BETA_SECRET = "whsec_YmV0YS1lMmUtLS0tLS0tLS0tLS0tLS0tLS0tLS0tLS0="  # noqa: S105 - a test secret
# Long enough for a results restart inside it; the dead-letter test restarts results with a short one.
RETRY_PERIOD_S = 120
SHORT_RETRY_PERIOD_S = 2


def chat(text: str, **fields: Any) -> dict[str, Any]:
    return {"scenario": "realtime_chat", "messages": [{"role": "user", "content": text}]} | fields


class Stack:
    def __init__(self, pipeline: Pipeline, receiver: Receiver, acme: TenantSpec, beta: TenantSpec) -> None:
        self.pipeline, self.receiver, self.acme, self.beta = pipeline, receiver, acme, beta

    def submit(self, callback_url: Any, spec: TenantSpec | None = None) -> httpx.Response:
        return httpx.post(
            f"{self.pipeline.ingest_url}/v1/requests",
            json=chat("hello webhook", callback_url=callback_url),
            headers=(spec or self.acme).headers(),
            timeout=10,
        )

    def accepted(self, path: str) -> str:
        response = self.submit(self.receiver.url(path))
        assert response.status_code == 202, response.text
        request_id: str = response.json()["request_id"]
        return request_id

    @property
    def results(self) -> ServiceProcess:
        return next(p for p in self.pipeline.processes if p.name == "results")

    def outbox_rows(self, request_id: str) -> int:
        with sqlite3.connect(self.pipeline.work_dir / "results.db", timeout=5) as db:
            return int(
                db.execute(
                    "SELECT COUNT(*) FROM webhook_outbox WHERE request_id = ?", (request_id,)
                ).fetchone()[0]
            )

    def wait_outbox_empty(self, request_id: str, timeout_s: float = 30.0) -> None:
        wait_until(
            lambda: not self.outbox_rows(request_id),
            f"{request_id} out of the outbox",
            timeout_s,
            interval_s=0.05,
        )

    def restart_results(self, **env: str) -> None:
        self.results.env.update(env)
        self.results.start()
        self.results.wait_http_ready(
            f"{self.pipeline.results_url}/healthz",
            60,
            lambda r: r.status_code == 200 and r.json()["status"] == "ok",
        )


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work_dir = tmp_path_factory.mktemp("webhooks")
    with webhook_receiver() as receiver, webhook_receiver() as beta_receiver:
        acme = TenantSpec(
            "acme",
            extra={"webhook_secret": ACME_SECRET},
            entitlements={"callback_hosts": [f"127.0.0.1:{receiver.port}"]},
        )
        beta = TenantSpec(
            "beta",
            extra={"webhook_secret": BETA_SECRET},
            entitlements={"callback_hosts": [f"127.0.0.1:{beta_receiver.port}"]},
        )
        with webhook_pipeline(
            kafka_bootstrap, work_dir, acme, beta, name="e2ew", retry_period_s=RETRY_PERIOD_S
        ) as pipeline:
            yield Stack(pipeline, receiver, acme, beta)


def assert_signed(delivery: Any, secret: str) -> dict[str, Any]:
    """Verify as docs/api.md tells a receiver to (the `standardwebhooks` package); returns the body."""
    body: dict[str, Any] = Webhook(secret).verify(delivery.body, delivery.headers)
    assert delivery.headers["content-type"] == "application/json"
    return body


def test_a_request_with_a_callback_gets_exactly_one_signed_post_of_its_outcome(stack: Stack) -> None:
    path = f"/ok/{uuid.uuid4().hex[:8]}"
    request_id = stack.accepted(path)
    [delivery] = stack.receiver.wait_for(path, status=200)
    stack.wait_outbox_empty(request_id)  # nothing left to send: the one POST is the only one
    assert len(stack.receiver.to(path)) == 1
    body = assert_signed(delivery, ACME_SECRET)
    served = httpx.get(
        f"{stack.pipeline.results_url}/v1/requests/{request_id}", headers=stack.acme.headers(), timeout=5
    ).json()
    assert body == served  # the same shape as GET /v1/requests/{id}
    assert body["status"] == "OK" and "hello webhook" in body["output"]
    assert delivery.headers["inferq-attempt"] == "1"
    uuid.UUID(delivery.headers["webhook-id"])


def test_a_receiver_failing_at_first_gets_it_after_retries_with_the_same_delivery_id(stack: Stack) -> None:
    path = f"/flaky/3/{uuid.uuid4().hex[:8]}"
    request_id = stack.accepted(path)
    deliveries = stack.receiver.wait_for(path, status=200)
    stack.wait_outbox_empty(request_id)
    assert [d.status for d in stack.receiver.to(path)] == [503, 503, 503, 200]
    assert len({d.headers["webhook-id"] for d in deliveries}) == 1
    assert [d.headers["inferq-attempt"] for d in deliveries] == ["1", "2", "3", "4"]
    assert len({d.body for d in deliveries}) == 1
    for delivery in deliveries:
        assert_signed(delivery, ACME_SECRET)


def test_410_gone_stops_the_deliveries(stack: Stack) -> None:
    path = f"/gone/{uuid.uuid4().hex[:8]}"
    request_id = stack.accepted(path)
    stack.receiver.wait_for(path)
    stack.wait_outbox_empty(request_id)
    assert [d.status for d in stack.receiver.to(path)] == [410]


def test_pending_deliveries_survive_a_crash_of_the_results_service(stack: Stack) -> None:
    path = f"/hold/{uuid.uuid4().hex[:8]}"
    stack.receiver.held.set()
    try:
        request_id = stack.accepted(path)
        stack.receiver.wait_for(path, count=2)  # stored, tried, failing
        stack.results.kill()
    finally:
        stack.receiver.held.clear()
    assert stack.outbox_rows(request_id) == 1
    stack.restart_results()
    deliveries = stack.receiver.wait_for(path, status=200)
    stack.wait_outbox_empty(request_id)
    assert [d.status for d in stack.receiver.to(path)].count(200) == 1
    assert len({d.headers["webhook-id"] for d in deliveries}) == 1


@pytest.mark.parametrize(
    ("callback", "says"),
    [
        ("http://127.0.0.1:1/hook", "not among this tenant's callback_hosts"),
        ("http://10.0.0.7/hook", "not among this tenant's callback_hosts"),
        ("https://hooks.elsewhere.example/hook", "not among this tenant's callback_hosts"),
        ("http://user:pw@127.0.0.1/hook", "credentials"),
        ("ftp://127.0.0.1/hook", "scheme"),
        ("http://2130706433/hook", "non-canonical"),
        ("http://127.0.0.1/" + "a" * 2_100, "at most 2048"),
        (42, "valid string"),
    ],
)
def test_a_refused_callback_is_422_and_nothing_is_sent(stack: Stack, callback: Any, says: str) -> None:
    response = stack.submit(callback)
    assert response.status_code == 422, response.text
    [problem] = response.json()["problems"]
    assert problem["field"] == "callback_url" and says in problem["problem"]


def test_another_tenants_receiver_is_refused(stack: Stack) -> None:
    # beta's receiver: allowed for beta, refused for acme.
    beta_host = stack.beta.entitlements["callback_hosts"][0]
    refused = stack.submit(f"http://{beta_host}/ok/x", stack.acme)
    assert refused.status_code == 422
    assert "not among this tenant's callback_hosts" in refused.json()["problems"][0]["problem"]
    assert stack.submit(f"http://{beta_host}/ok/x", stack.beta).status_code == 202


def test_the_ssrf_guard_refuses_private_addresses_at_submission_without_the_test_setting(
    stack: Stack,
) -> None:
    """A second ingest with the production default (no private addresses): a tenant listing a
    loopback or private host still cannot use it."""
    spec = TenantSpec(
        "careless",
        extra={"webhook_secret": ACME_SECRET},
        entitlements={"callback_hosts": ["127.0.0.1", "localhost", "10.0.0.7", "169.254.169.254"]},
    )
    work_dir = stack.pipeline.work_dir
    tenants_file = write_tenants(work_dir / "careless.toml", spec)
    port = free_port()
    env = stack.pipeline._env() | {
        "INFERQ_TENANTS_FILE": str(tenants_file),
        "INFERQ_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "false",
    }
    ingest = ServiceProcess(
        "ingest-strict",
        ["ingest", "--port", str(port), "--metrics-port", "0"],  # /metrics: any free port
        work_dir / "logs" / "ingest-strict.log",
        env=env,
    )
    ingest.start()
    try:
        ingest.wait_http_ready(f"http://127.0.0.1:{port}/healthz", 60)
        for url, kind in [
            ("https://127.0.0.1/hook", "loopback"),
            ("https://localhost/hook", "loopback"),
            ("https://10.0.0.7/hook", "private"),
            ("https://169.254.169.254/latest/meta-data", "link-local"),
        ]:
            response = httpx.post(
                f"http://127.0.0.1:{port}/v1/requests",
                json=chat("x", callback_url=url),
                headers=spec.headers(),
                timeout=10,
            )
            assert response.status_code == 422, response.text
            assert kind in response.json()["problems"][0]["problem"]
    finally:
        assert ingest.stop() == 0


def test_a_receiver_that_always_fails_yields_a_dead_letter_after_the_retry_period(stack: Stack) -> None:
    # Restarted with a short period (the module's is long enough for the crash test above).
    stack.results.stop()
    stack.restart_results(INFERQ_WEBHOOK_RETRY_PERIOD_S=str(SHORT_RETRY_PERIOD_S))
    path = f"/down/{uuid.uuid4().hex[:8]}"
    request_id = stack.accepted(path)
    stack.receiver.wait_for(path, count=2)
    stack.wait_outbox_empty(request_id, timeout_s=60)
    letters = [
        m
        for m in read_all(
            stack.pipeline.bootstrap, f"{stack.pipeline.topic_prefix}.dlq", expect=1, timeout_s=30
        )
        if dict(m.headers() or []).get("inferq.request_id") == request_id.encode()
    ]
    [letter] = letters
    headers = dict(letter.headers())
    attempts = stack.receiver.to(path)
    assert headers["inferq.dead_letter.kind"] == b"webhook"
    assert headers["inferq.tenant"] == b"acme"
    assert b"retry period" in headers["inferq.error"] and b"HTTP 500" in headers["inferq.error"]
    assert headers["inferq.webhook.delivery_id"].decode() == attempts[0].headers["webhook-id"]
    assert int(headers["inferq.webhook.attempts"]) == len(attempts) >= 2
    assert json.loads(letter.value())["request_id"] == request_id
    assert ACME_SECRET.encode() not in letter.value() + b"".join(headers.values())
    log = (stack.pipeline.work_dir / "logs" / "results.log").read_text(errors="replace")
    assert ACME_SECRET not in log and BETA_SECRET not in log
