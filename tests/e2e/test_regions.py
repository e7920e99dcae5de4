"""Two regions on the real broker, the services as processes: each regional ingest's results land on
its region's reply topic; a results service for one region serves that region's results only, one
for `all` serves both."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest

from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.demo.workload import wait_outcomes
from inferq.tools.stack.process import ServiceProcess
from tests.support.inprocess import free_port
from tests.support.kafka import end_offsets, read_all

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

READY_S = 60.0


@dataclass
class Regions:
    prefix: str
    urls: dict[str, str]  # service name → base URL
    processes: list[ServiceProcess]


@pytest.fixture(scope="module")
def regions(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Regions]:
    prefix = f"r{uuid.uuid4().hex[:10]}"
    outcome = create_topics(
        KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix), regions=["eu", "us"]
    )
    assert outcome[f"{prefix}.results.eu"] == outcome[f"{prefix}.results.us"] == "created"
    work = tmp_path_factory.mktemp("regions")
    ports = {
        name: free_port()
        for name in ("backend", "dispatcher", "ingest-eu", "ingest-us", "results-eu", "results-all")
    }
    base = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "INFERQ_TOPIC_PREFIX": prefix,
        "INFERQ_DISPATCHER_BACKEND_URL": f"http://127.0.0.1:{ports['backend']}/v1",
        "INFERQ_DISPATCHER_GROUP_ID": f"{prefix}-dispatcher",
        "INFERQ_RESULTS_GROUP_ID": f"{prefix}-results",
        "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
        # Two of each service: /metrics on any free port (nothing here reads them).
        "INFERQ_INGEST_METRICS_PORT": "0",
        "INFERQ_RESULTS_METRICS_PORT": "0",
    }

    def service(name: str, args: list[str], **env: str) -> ServiceProcess:
        proc = ServiceProcess(name, [*args, "--port", str(ports[name])], work / f"{name}.log", env=base | env)
        processes.append(proc)
        proc.start()
        return proc

    processes: list[ServiceProcess] = []
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    try:
        service("backend", ["sim-backend", "--speed", "10"])
        service("dispatcher", ["dispatcher"])
        service("ingest-eu", ["ingest"], INFERQ_REGION="eu")
        service("ingest-us", ["ingest"], INFERQ_REGION="us")
        service("results-eu", ["results", "--region", "eu"], INFERQ_RESULTS_DB_PATH=str(work / "eu.db"))
        service(
            "results-all",
            ["results"],
            INFERQ_RESULTS_REGION="all",
            INFERQ_RESULTS_DB_PATH=str(work / "all.db"),
        )
        for proc in processes:
            proc.wait_http_ready(f"{urls[proc.name]}/healthz", READY_S, ready(proc.name))
        yield Regions(prefix, urls, processes)
    finally:
        # Ingest first (no new work), then the dispatcher drains, then the rest.
        codes = {p.name: p.stop() for p in sorted(processes, key=lambda p: not p.name.startswith("ingest"))}
        assert all(code == 0 for code in codes.values()), f"unclean exits: {codes}"


def ready(name: str) -> Callable[[httpx.Response], bool]:
    """When a service is ready: results once consuming, the dispatcher once it owns partitions."""
    if name.startswith("results"):
        return lambda r: r.status_code == 200 and r.json()["status"] == "ok"
    if name == "dispatcher":
        return lambda r: r.status_code == 200 and r.json().get("assigned", 0) > 0
    return lambda r: r.status_code == 200


def submit(url: str, count: int, tag: str) -> list[str]:
    ids = []
    for n in range(count):
        body = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": f"{tag} {n}"}]}
        response = httpx.post(f"{url}/v1/requests", json=body, timeout=10)
        assert response.status_code == 202, response.text
        ids.append(response.json()["request_id"])
    return ids


def test_each_regions_results_land_on_its_topic_and_are_served_by_its_results_service(
    regions: Regions, kafka_bootstrap: str
) -> None:
    eu = submit(regions.urls["ingest-eu"], 3, "from eu")
    us = submit(regions.urls["ingest-us"], 3, "from us")

    everything = asyncio.run(wait_outcomes(regions.urls["results-all"], eu + us, timeout_s=60))
    assert {rid: o["status"] for rid, o in everything.items()} == dict.fromkeys(eu + us, "OK")
    served_eu = asyncio.run(wait_outcomes(regions.urls["results-eu"], eu, timeout_s=30))
    assert set(served_eu) == set(eu)
    assert served_eu[eu[0]]["output"] == "sim reply to: from eu 0"

    # The eu service has every eu result by now; a us result never reaches it.
    for rid in us:
        assert httpx.get(f"{regions.urls['results-eu']}/v1/requests/{rid}", timeout=5).status_code == 404
    on_eu = read_all(kafka_bootstrap, f"{regions.prefix}.results.eu", expect=3)
    on_us = read_all(kafka_bootstrap, f"{regions.prefix}.results.us", expect=3)
    assert {m.key().decode() for m in on_eu} == set(eu)
    assert {m.key().decode() for m in on_us} == set(us)
    assert sum(end_offsets(kafka_bootstrap, f"{regions.prefix}.results").values()) == 0


def test_topics_list_shows_the_regional_topics(regions: Regions, kafka_bootstrap: str) -> None:
    env = os.environ | {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "INFERQ_TOPIC_PREFIX": regions.prefix}
    listing = subprocess.run(
        [sys.executable, "-m", "inferq.cli", "topics", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = listing.stdout.splitlines()
    for region in ("eu", "us"):
        (line,) = [line for line in lines if line.startswith(f"{regions.prefix}.results.{region} ")]
        assert "present" in line and f"results of region {region}" in line


def test_a_regional_ingests_chat_completions_wait_on_its_regions_reply_topic(
    regions: Regions, kafka_bootstrap: str
) -> None:
    answers = {}
    for region in ("eu", "us"):
        client = openai.OpenAI(
            base_url=f"{regions.urls[f'ingest-{region}']}/v1", api_key="open", max_retries=0
        )
        answers[region] = client.chat.completions.create(
            model="inferq", messages=[{"role": "user", "content": f"hello from {region}"}]
        )
        client.close()
        assert answers[region].choices[0].message.content == f"sim reply to: hello from {region}"
    # The eu answer went to eu's topic (its ingest followed it), the us one to us's, and the
    # results service of all regions can read each with a long poll.
    for region, answer in answers.items():
        stored = httpx.get(
            f"{regions.urls['results-all']}/v1/requests/{answer.id}", params={"wait": 30}, timeout=40
        )
        assert stored.status_code == 200
        assert stored.json()["output"] == answer.choices[0].message.content
        keys = {
            m.key().decode()
            for m in read_all(kafka_bootstrap, f"{regions.prefix}.results.{region}", expect=10, timeout_s=5)
        }
        assert answer.id in keys
