"""inferq's image, built from this checkout (infra/container/Dockerfile), runs as a user would run
it: ingest, the dispatcher and results each in a container of it, against the real local broker,
with the checkout's simulated backend; a request goes in at ingest and comes back from results.

Opt-in (`-m container`, `make test-container`): it needs podman, and a first build takes minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.demo.workload import wait_outcomes
from inferq.tools.stack.process import ServiceProcess
from tests.support.containers import Container, build_image, run_once, running_container
from tests.support.inprocess import free_port

pytestmark = [pytest.mark.container, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1200)]

READY_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()


def test_the_image_runs_as_a_user_other_than_root(image: str) -> None:
    assert run_once(image, "-u", entrypoint="id").strip() != "0"
    assert run_once(image, "-un", entrypoint="id").strip() == "inferq"


def test_the_image_runs_the_checkouts_inferq(image: str) -> None:
    assert run_once(image, "--version").strip() == f"inferq {version('inferq')}"
    # No command: the help, which lists every service the command picks.
    listed = run_once(image)
    for service in ("ingest", "dispatcher", "results", "topics"):
        assert f"    {service}" in listed
    # compose.yaml's `sim` profile runs the simulated backend from this image (the base install).
    assert "--speed" in run_once(image, "sim-backend", "--help")


@contextlib.contextmanager
def sim_backend(port: int, log_dir: Path) -> Iterator[None]:
    """The checkout's simulated backend (a process, not the image: the image is the base install)."""
    backend = ServiceProcess(
        "sim-backend", ["sim-backend", "--port", str(port), "--speed", "5"], log_dir / "sim-backend.log"
    )
    backend.start()
    try:
        backend.wait_http_ready(f"http://127.0.0.1:{port}/healthz", READY_TIMEOUT_S)
        yield
    finally:
        backend.stop()


def test_a_request_goes_through_the_services_in_containers(
    image: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"c{uuid.uuid4().hex[:12]}"
    create_topics(KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix))
    ports = {name: free_port() for name in ("ingest", "dispatcher", "results", "backend")}
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "INFERQ_TOPIC_PREFIX": prefix,
        "INFERQ_DISPATCHER_BACKEND_URL": f"http://127.0.0.1:{ports['backend']}/v1",
        "INFERQ_DISPATCHER_GROUP_ID": f"{prefix}-dispatcher",
        "INFERQ_RESULTS_GROUP_ID": f"{prefix}-results",
        # The test must not depend on the hour it runs at.
        "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
        # /metrics of ingest and results: any free port (nothing here reads them).
        "INFERQ_INGEST_METRICS_PORT": "0",
        "INFERQ_RESULTS_METRICS_PORT": "0",
    }
    with contextlib.ExitStack() as stack:
        stack.enter_context(sim_backend(ports["backend"], tmp_path))

        def start(service: str) -> Container:
            return stack.enter_context(
                running_container(image, f"{prefix}-{service}", [service, "--port", str(ports[service])], env)
            )

        results, dispatcher, ingest = start("results"), start("dispatcher"), start("ingest")
        results.wait_http_ready(
            f"http://127.0.0.1:{ports['results']}/healthz",
            READY_TIMEOUT_S,
            lambda r: r.status_code == 200 and r.json()["status"] == "ok",
        )
        ingest.wait_http_ready(f"http://127.0.0.1:{ports['ingest']}/healthz", READY_TIMEOUT_S)
        # Before the dispatcher owns partitions, the request would wait on a rebalance.
        dispatcher.wait_http_ready(
            f"http://127.0.0.1:{ports['dispatcher']}/healthz",
            READY_TIMEOUT_S,
            lambda r: r.status_code == 200 and r.json().get("assigned", 0) > 0,
        )

        body = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "from a container?"}]}
        accepted = httpx.post(f"http://127.0.0.1:{ports['ingest']}/v1/requests", json=body, timeout=10)
        assert accepted.status_code == 202, accepted.text
        request_id = accepted.json()["request_id"]
        outcomes = asyncio.run(
            wait_outcomes(f"http://127.0.0.1:{ports['results']}", [request_id], timeout_s=60)
        )
        assert outcomes.get(request_id, {}).get("status") == "OK", outcomes
        assert outcomes[request_id]["output"]

        # Stopped as an orchestrator stops them (SIGTERM): each drains and exits 0, in the order
        # the pipeline stops (no new work first).
        codes = {c.name: c.stop() for c in (ingest, dispatcher, results)}
        assert codes == dict.fromkeys(codes, 0), {
            c.name: c.logs()[-2000:] for c in (ingest, dispatcher, results)
        }
