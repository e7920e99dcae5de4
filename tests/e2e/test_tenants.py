"""Tenants end to end: the services as processes on the real broker, a tenants file, keys over HTTP.

One pipeline (tenants file reloaded every second) for keys, scoping, entitlements, rates and the
reload on change; one more ingest and results pair with an hour's reload interval, so only SIGHUP
can make them see a rewritten file; and open mode refused off loopback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.tools.stack.pipeline import Pipeline
from inferq.tools.stack.process import ServiceProcess
from tests.support.inprocess import free_port
from tests.support.pipeline import running_pipeline
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RELOAD_INTERVAL_S = 1.0
ACME = TenantSpec("acme")
BETA = TenantSpec("beta")
NARROW = TenantSpec(
    "narrow",
    max_tier="LOW",
    scenarios=["realtime_chat"],
    entitlements={"max_estimated_tokens": 100},
    params={"max_tokens": 64},
)
LIMITED = TenantSpec("limited", extra={"requests_per_minute": 2})
ROTATING = TenantSpec("rotating")
TENANTS = (ACME, BETA, NARROW, LIMITED, ROTATING)


def chat(text: str, **fields: Any) -> dict[str, Any]:
    return {"scenario": "realtime_chat", "messages": [{"role": "user", "content": text}]} | fields


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    work_dir = tmp_path_factory.mktemp("tenants")
    tenants_file = write_tenants(work_dir / "tenants.toml", *TENANTS)
    with running_pipeline(
        kafka_bootstrap,
        work_dir,
        name="e2et",
        budget=4,
        backend_args=["--speed", "5"],
        extra_env={
            "INFERQ_TENANTS_FILE": str(tenants_file),
            "INFERQ_TENANTS_RELOAD_INTERVAL_S": str(RELOAD_INTERVAL_S),
        },
    ) as stack:
        yield stack


def post(url: str, body: Any, spec: TenantSpec | None = None, **headers: str) -> httpx.Response:
    all_headers = (spec.headers() if spec is not None else {}) | headers
    return httpx.post(f"{url}/v1/requests", json=body, headers=all_headers, timeout=10)


def outcome(results_url: str, request_id: str, spec: TenantSpec, timeout_s: float = 30.0) -> dict[str, Any]:
    def read() -> httpx.Response:
        response = httpx.get(f"{results_url}/v1/requests/{request_id}", headers=spec.headers(), timeout=5)
        assert response.status_code in (200, 404), response.text
        return response

    found: dict[str, Any] = wait_until(
        read,
        f"an outcome for {spec.name}'s {request_id}",
        timeout_s,
        interval_s=0.1,
        done=lambda r: r.is_success,
    ).json()
    return found


def test_no_valid_key_is_401_at_ingest_and_results(pipeline: Pipeline) -> None:
    for headers in ({}, {"authorization": "Bearer iq_nobodyhasthiskey"}, {"authorization": "Basic eDp5"}):
        posted = post(pipeline.ingest_url, chat("hi"), **headers)
        read = httpx.get(f"{pipeline.results_url}/v1/requests/anything", headers=headers, timeout=5)
        assert posted.status_code == read.status_code == 401
        assert posted.headers["www-authenticate"].startswith("Bearer")
        assert posted.json()["error"] and read.json()["error"]


def test_the_same_id_from_two_tenants_gives_two_results_each_readable_by_its_own_tenant_only(
    pipeline: Pipeline,
) -> None:
    rid = f"victim-{uuid.uuid4().hex[:8]}"
    squat = post(pipeline.ingest_url, chat("acme asks first", request_id=rid), ACME)
    victim = post(pipeline.ingest_url, chat("beta's own question", request_id=rid), BETA)
    assert squat.status_code == victim.status_code == 202
    assert victim.json()["duplicate"] is False  # not the squatter's answer
    acme_sees = outcome(pipeline.results_url, rid, ACME)
    beta_sees = outcome(pipeline.results_url, rid, BETA)
    assert acme_sees["status"] == beta_sees["status"] == "OK"
    assert "acme asks first" in acme_sees["output"] and "beta's own" in beta_sees["output"]
    # A third tenant, and a tenant asking for another's by name, see nothing.
    stranger = httpx.get(f"{pipeline.results_url}/v1/requests/{rid}", headers=NARROW.headers(), timeout=5)
    assert stranger.status_code == 404
    named = httpx.get(
        f"{pipeline.results_url}/v1/requests/{rid}",
        headers=ACME.headers(),
        params={"tenant": "beta"},
        timeout=5,
    )
    assert named.status_code == 403


def test_entitlements_refuse_with_403_and_lower_the_tier(pipeline: Pipeline) -> None:
    refusals = {
        "tenant": chat("x", tenant="acme"),
        "scenario": {"scenario": "batch", "messages": [{"role": "user", "content": "x"}]},
        "model": chat("x", model="inferq-accurate"),
        "params.temperature": chat("x", params={"temperature": 0.5}),
        "params.max_tokens": chat("x", params={"max_tokens": 65}),
        "estimated_tokens": chat("x", estimated_tokens=101),
        "messages.0.role": {"scenario": "realtime_chat", "messages": [{"role": "system", "content": "x"}]},
    }
    for field, body in refusals.items():
        response = post(pipeline.ingest_url, body, NARROW)
        assert response.status_code == 403, (field, response.text)
        assert [p["field"] for p in response.json()["problems"]] == [field]
    lowered = post(pipeline.ingest_url, chat("capped", priority="HIGH"), NARROW)
    assert lowered.status_code == 202 and lowered.json()["tier"] == "LOW"
    result = outcome(pipeline.results_url, lowered.json()["request_id"], NARROW, timeout_s=60)
    assert result["tier"] == "LOW" and result["status"] == "OK"


def test_a_tenant_over_its_rate_gets_429_while_another_is_admitted(pipeline: Pipeline) -> None:
    answers = [post(pipeline.ingest_url, chat(f"n{i}"), LIMITED) for i in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 429]
    refused = answers[-1]
    assert refused.json()["quota"] == "requests_per_minute" and refused.json()["tenant"] == "limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 30
    assert post(pipeline.ingest_url, chat("meanwhile"), BETA).status_code == 202


def test_a_rewritten_file_is_used_within_the_reload_interval(pipeline: Pipeline) -> None:
    path = Path(pipeline.extra_env["INFERQ_TENANTS_FILE"])
    new = TenantSpec("rotating")
    both = TenantSpec("rotating", keys=[new.key, ROTATING.key])
    write_tenants(path, *(t for t in TENANTS if t is not ROTATING), both)
    written_at = time.monotonic()
    wait_until(
        lambda: post(pipeline.ingest_url, chat("new"), new).status_code == 202, "the new key at ingest", 10
    )
    assert time.monotonic() - written_at < RELOAD_INTERVAL_S + 2
    # Each service reloads on its own timer: results within the interval too.
    wait_until(
        lambda: httpx.get(f"{pipeline.results_url}/v1/requests/x", headers=new.headers()).status_code == 404,
        "the new key at results",
        RELOAD_INTERVAL_S + 2,
    )
    accepted = post(pipeline.ingest_url, chat("old key, still valid"), ROTATING)
    assert accepted.status_code == 202  # both keys while clients move over
    assert outcome(pipeline.results_url, accepted.json()["request_id"], new)["status"] == "OK"
    write_tenants(path, *(t for t in TENANTS if t is not ROTATING), new)
    wait_until(
        lambda: post(pipeline.ingest_url, chat("old"), ROTATING).status_code == 401, "the old key refused", 10
    )
    wait_until(
        lambda: (
            httpx.get(f"{pipeline.results_url}/v1/requests/x", headers=ROTATING.headers()).status_code == 401
        ),
        "the old key refused at results",
        10,
    )
    # A broken rewrite keeps the tenants in force.
    path.write_text("[[tenants]]\nname = 'rotating'\nweight = 0\n")
    for service in ("ingest", "results"):
        wait_until(
            lambda service=service: (
                "tenants file invalid, keeping the previous tenants" in _log(pipeline, service)
            ),
            f"{service} logs the broken file",
            RELOAD_INTERVAL_S + 5,
        )
    assert post(pipeline.ingest_url, chat("still here"), new).status_code == 202
    write_tenants(path, *(t for t in TENANTS if t is not ROTATING), new)


def _log(pipeline: Pipeline, name: str) -> str:
    [proc] = [p for p in pipeline.processes if p.name == name]
    return proc.log_path.read_text(errors="replace")


def test_sighup_reloads_at_once(pipeline: Pipeline, kafka_bootstrap: str, tmp_path: Path) -> None:
    path = write_tenants(tmp_path / "tenants.toml", ACME)
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "INFERQ_TOPIC_PREFIX": pipeline.topic_prefix,
        "INFERQ_TENANTS_FILE": str(path),
        "INFERQ_TENANTS_RELOAD_INTERVAL_S": "3600",
        "INFERQ_DISPATCHER_GROUP_ID": f"{pipeline.topic_prefix}-dispatcher",
        "INFERQ_RESULTS_GROUP_ID": f"{pipeline.topic_prefix}-results-sighup",
        "INFERQ_RESULTS_DB_PATH": str(tmp_path / "results.db"),
        "INFERQ_INGEST_METRICS_PORT": "0",
        "INFERQ_RESULTS_METRICS_PORT": "0",
    }
    ingest_port, results_port = free_port(), free_port()
    ingest = ServiceProcess(
        "ingest", ["ingest", "--port", str(ingest_port)], tmp_path / "ingest.log", env=env
    )
    results = ServiceProcess(
        "results", ["results", "--port", str(results_port)], tmp_path / "results.log", env=env
    )
    ingest_url, results_url = f"http://127.0.0.1:{ingest_port}", f"http://127.0.0.1:{results_port}"
    try:
        ingest.start()
        results.start()
        ingest.wait_http_ready(f"{ingest_url}/healthz", 60)
        results.wait_http_ready(f"{results_url}/healthz", 60)
        assert post(ingest_url, chat("before"), BETA).status_code == 401
        write_tenants(path, ACME, BETA)
        time.sleep(1.5)  # polling would have seen it by now, were it on
        assert post(ingest_url, chat("not yet"), BETA).status_code == 401
        ingest.signal(signal.SIGHUP)
        results.signal(signal.SIGHUP)
        wait_until(lambda: post(ingest_url, chat("now"), BETA).status_code == 202, "SIGHUP at ingest", 5)
        wait_until(
            lambda: httpx.get(f"{results_url}/v1/requests/x", headers=BETA.headers()).status_code == 404,
            "SIGHUP at results",
            5,
        )
        assert ingest.alive() and results.alive()  # SIGHUP's default would have ended them
    finally:
        assert ingest.stop() == 0
        assert results.stop() == 0
    assert "SIGHUP: reloading the tenants file" in ingest.log_path.read_text()


@pytest.mark.parametrize("service", ["ingest", "results"])
def test_open_mode_on_every_address_refuses_to_start(service: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "INFERQ_TENANTS_FILE"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "inferq.cli", service, "--host", "0.0.0.0", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert time.monotonic() - started < 60
    assert "open mode serves anyone without a key, so it binds only to a loopback address" in done.stderr
    assert "'0.0.0.0' is not one" in done.stderr
