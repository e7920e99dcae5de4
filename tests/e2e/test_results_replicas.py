"""Two results replicas, each with its own port and database, behind no load balancer: the test
asks either. Ingest, dispatcher, both replicas and the simulated backend run as processes on the
real broker, with webhooks configured (a tenants file and a local receiver).

Any replica answers any request's `GET`, `?wait=` long poll and `/events` stream (before, each knew
only the partitions its consumer group gave it, and answered 404 for the rest); each webhook is sent
once; one replica killed (SIGKILL) while requests keep coming loses neither a result nor a webhook:
the survivor answers every request and sends the dead one's deliveries after the group's session
timeout, a delivery sent twice (made just before the kill, not yet committed) carrying one delivery
id, which receivers deduplicate on.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.tools.stack.pipeline import Pipeline
from tests.support.pipeline import running_pipeline
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until
from tests.support.webhook_receiver import LOOPBACK_WEBHOOKS, Receiver, webhook_receiver

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SECRET = "whsec_cmVwbGljYXMtZTJlLS0tLS0tLS0tLS0tLS0tLS0tLS0="  # noqa: S105 - a test secret
FIRST_WAVE = 40
SECOND_WAVE = 40
# The second wave's replica is killed after this many of its requests were accepted.
KILL_AFTER = 12
# The reply topic's partitions (`TopicTable.specs`).
PARTITIONS = 6


class Replicas:
    def __init__(self, pipeline: Pipeline, receiver: Receiver, tenant: TenantSpec) -> None:
        self.pipeline, self.receiver, self.tenant = pipeline, receiver, tenant
        self.urls = [pipeline.results_replica_url(i) for i in range(2)]
        # Each request's receiver path, to find its deliveries.
        self.paths: dict[str, str] = {}

    def submit(self, text: str) -> str:
        path = f"/ok/{uuid.uuid4().hex[:12]}"
        response = httpx.post(
            f"{self.pipeline.ingest_url}/v1/requests",
            json={
                "scenario": "realtime_chat",
                "messages": [{"role": "user", "content": text}],
                "callback_url": self.receiver.url(path),
            },
            headers=self.tenant.headers(),
            timeout=10,
        )
        assert response.status_code == 202, response.text
        request_id: str = response.json()["request_id"]
        self.paths[request_id] = path
        return request_id

    def get(self, url: str, request_id: str, **params: Any) -> httpx.Response:
        return httpx.get(
            f"{url}/v1/requests/{request_id}", params=params, headers=self.tenant.headers(), timeout=40
        )

    def events(self, url: str, request_id: str) -> list[tuple[str, str]]:
        """The event stream's (event, data) pairs, up to its end."""
        seen: list[tuple[str, str]] = []
        event = ""
        with httpx.stream(
            "GET", f"{url}/v1/requests/{request_id}/events", headers=self.tenant.headers(), timeout=40
        ) as stream:
            assert stream.status_code == 200
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    event = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    seen.append((event, line.split(":", 1)[1].strip()))
                    if event in {"result", "timeout"}:
                        break
        return seen

    def owned(self, index: int) -> set[str]:
        """The partitions replica `index` said last it sends the webhooks of (its log)."""
        name = "results" if index == 0 else f"results-{index}"
        log = (self.pipeline.work_dir / "logs" / f"{name}.log").read_text(errors="replace")
        said = [
            line.split("sending the webhooks of ", 1)[1]
            for line in log.splitlines()
            if "sending the webhooks of" in line
        ]
        return set() if not said or said[-1] == "no partition" else set(said[-1].split(", "))

    def wait_owned(self, index: int, count: int, timeout_s: float = 30.0) -> set[str]:
        return wait_until(
            lambda: self.owned(index),
            f"replica {index} owning {count} partitions",
            timeout_s,
            interval_s=0.1,
            done=lambda owned: len(owned) == count,
        )

    def answered_by(self, url: str, request_ids: list[str]) -> int:
        """How many of `request_ids` a plain GET on `url` answers with their outcome."""
        return sum(1 for r in request_ids if self.get(url, r).status_code == 200)

    def deliveries(self) -> dict[str, list[Any]]:
        """The receiver's deliveries per request id (from the path it was sent to)."""
        by_path = {path: request_id for request_id, path in self.paths.items()}
        found: dict[str, list[Any]] = defaultdict(list)
        for delivery in list(self.receiver.deliveries):
            if delivery.path in by_path:
                found[by_path[delivery.path]].append(delivery)
        return found

    def wait_delivered(self, request_ids: list[str], timeout_s: float) -> dict[str, list[Any]]:
        def missing() -> list[str]:
            found = self.deliveries()
            return [r for r in request_ids if not any(d.status == 200 for d in found.get(r, []))]

        wait_until(missing, "every webhook delivered", timeout_s, interval_s=0.1, done=lambda left: not left)
        return self.deliveries()


@pytest.fixture(scope="module")
def replicas(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    work_dir = tmp_path_factory.mktemp("replicas")
    with webhook_receiver() as receiver:
        tenant = TenantSpec(
            "acme",
            extra={"webhook_secret": SECRET},
            entitlements={"callback_hosts": [f"127.0.0.1:{receiver.port}"]},
        )
        tenants_file = write_tenants(work_dir / "tenants.toml", tenant)
        with running_pipeline(
            kafka_bootstrap,
            work_dir,
            name="e2err",
            budget=8,
            backend_args=["--speed", "5"],
            results_replicas=2,
            clean_exits=False,
            extra_env={
                "INFERQ_TENANTS_FILE": str(tenants_file),
                **LOOPBACK_WEBHOOKS,
                "INFERQ_WEBHOOK_POLL_INTERVAL_S": "0.2",
                # The local broker allows 2 s sessions: a dead replica's webhooks move after about 2 s.
                "INFERQ_RESULTS_SESSION_TIMEOUT_MS": "2000",
            },
        ) as pipeline:
            yield Replicas(pipeline, receiver, tenant)
            codes = {p.name: p.stop() for p in pipeline.processes if p.name != "results-1"}
            assert all(code == 0 for code in codes.values()), f"unclean exits: {codes}"


def test_any_replica_answers_every_request_and_each_webhook_comes_once(replicas: Replicas) -> None:
    request_ids = [replicas.submit(f"wave one {i}") for i in range(FIRST_WAVE)]
    for request_id in request_ids:
        assert replicas.get(replicas.urls[0], request_id, wait=30).status_code == 200
    # Every replica holds every result: a plain GET on either answers all of them, the same.
    answered = [replicas.answered_by(url, request_ids) for url in replicas.urls]
    print(f"plain GET answered: replica 0 {answered[0]}/{FIRST_WAVE}, replica 1 {answered[1]}/{FIRST_WAVE}")
    assert answered == [FIRST_WAVE, FIRST_WAVE]
    for i, process in enumerate(replicas.pipeline.results_processes):
        rss = next(
            line
            for line in Path(f"/proc/{process.pid}/status").read_text().splitlines()
            if line.startswith("VmRSS")
        )
        db = replicas.pipeline.results_db(i)
        on_disk = sum(f.stat().st_size for f in db.parent.glob(db.name + "*"))
        print(f"replica {i}: {rss.split(':')[1].strip()} resident, {on_disk / 1e3:.0f} kB on disk")
    for request_id in request_ids[:5]:
        bodies = [replicas.get(url, request_id).json() for url in replicas.urls]
        assert bodies[0] == bodies[1] and bodies[0]["status"] == "OK"
    found = replicas.wait_delivered(request_ids, timeout_s=30)
    ids = {r: {d.headers["webhook-id"] for d in found[r]} for r in request_ids}
    assert all(len(one) == 1 for one in ids.values())
    # No failure happened: each webhook arrived exactly once, sent by one replica only.
    assert sorted(len(found[r]) for r in request_ids) == [1] * FIRST_WAVE
    for request_id in request_ids[:3]:
        assert json.loads(found[request_id][0].body)["request_id"] == request_id


def test_a_long_poll_and_an_event_stream_work_on_both_replicas(replicas: Replicas) -> None:
    # Exactly one replica sends this request's webhook (owns its partition): asking both covers
    # the replica that does not own it.
    for _ in range(3):
        request_id = replicas.submit("wait for me")
        with ThreadPoolExecutor(4) as pool:
            polls = [pool.submit(replicas.get, url, request_id, wait=30) for url in replicas.urls]
            streams = [pool.submit(replicas.events, url, request_id) for url in replicas.urls]
            for poll in polls:
                response = poll.result(timeout=60)
                assert response.status_code == 200 and response.json()["status"] == "OK"
            for stream in streams:
                event, data = stream.result(timeout=60)[-1]
                assert event == "result" and json.loads(data)["request_id"] == request_id


def test_a_replica_killed_mid_run_loses_no_result_and_no_webhook(replicas: Replicas) -> None:
    survivor, killed = replicas.urls[0], replicas.pipeline.results_processes[1]
    # The replica to kill sends some partitions' webhooks: the survivor must take them over.
    before = [replicas.owned(0), replicas.owned(1)]
    print(f"partitions owned before the kill: {len(before[0])} and {len(before[1])}")
    assert before[0] and before[1] and not before[0] & before[1] and len(before[0] | before[1]) == PARTITIONS
    request_ids: list[str] = []
    killed_at: list[float] = []

    def keep_submitting() -> None:
        for i in range(SECOND_WAVE):
            request_ids.append(replicas.submit(f"wave two {i}"))
            if i + 1 == KILL_AFTER:
                killed.kill()
                killed_at.append(time.time())
            time.sleep(0.05)

    submitter = threading.Thread(target=keep_submitting, name="submitter")
    submitter.start()
    submitter.join(timeout=60)
    assert not submitter.is_alive() and killed_at and not killed.alive()
    for request_id in request_ids:
        assert replicas.get(survivor, request_id, wait=30).status_code == 200
    answered = replicas.answered_by(survivor, request_ids)
    print(f"after the kill, the survivor answered {answered}/{SECOND_WAVE}")
    assert answered == SECOND_WAVE
    found = replicas.wait_delivered(request_ids, timeout_s=60)
    assert replicas.wait_owned(0, PARTITIONS) == before[0] | before[1]
    last = max(d.received_at_ns for r in request_ids for d in found[r])
    attempts = Counter(len(found[r]) for r in request_ids)
    duplicates = sum(len(found[r]) - 1 for r in request_ids)
    print(
        f"webhooks after the kill: {len(request_ids)} requests, all delivered, "
        f"{duplicates} duplicates (attempts per request {dict(attempts)}), "
        f"the last {last / 1e9 - killed_at[0]:.1f} s after the kill"
    )
    # A duplicate is the same delivery (one id), which receivers drop: never a second one.
    assert all(len({d.headers["webhook-id"] for d in found[r]}) == 1 for r in request_ids)
    assert all(d.status == 200 for r in request_ids for d in found[r])
    health = httpx.get(f"{survivor}/healthz", timeout=5)
    assert health.status_code == 200 and health.json()["status"] == "ok"
