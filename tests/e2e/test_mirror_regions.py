"""Two clusters joined by MirrorMaker 2 (`inferq mirror`): a regional one ("eu") and a central one.

The eu backend is the Kafka-native client (`KafkaTransport`): it produces to eu's request topics and
reads eu's reply topic, and touches no other cluster. MirrorMaker copies eu's requests to the central
cluster, where the dispatcher (and the simulated LLM backend) run, and copies the outcomes the
dispatcher writes to ``<prefix>.results.eu`` back to eu, where a results service for eu stores them.

The chaos test SIGKILLs MirrorMaker while requests stream in and starts it again. MirrorMaker
delivers at least once, so the records it copied after its last offset commit are copied twice.
The dispatcher skips a copy of a request it answered OK already; a copy read while the first still
runs is served again. What the test holds (the bound): no request is lost; every caller gets one
outcome; the results service stores one per request and counts the rest as duplicates; the
backend never runs a request more often than copies of it reached the central cluster (no errors,
so no retries), and every extra copy is either skipped by the dispatcher or served again; only
requests produced before the kill are copied twice. The figures are printed (`-s`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from inferq.client import InferqClient
from inferq.client.kafka import KafkaTransport
from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.bench.recorder import marked_content
from inferq.tools.broker.broker import LocalBroker
from inferq.tools.broker.ephemeral import broker_on_free_ports
from inferq.tools.mirror.config import MirrorConfig
from inferq.tools.mirror.mirror import LocalMirrorMaker
from inferq.tools.paths import find_project_root
from inferq.tools.stack.process import ServiceProcess
from tests.support.inprocess import free_port
from tests.support.kafka import end_offsets, read_all
from tests.support.scrape import metric_sum
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

READY_S = 90.0
HEAP = "512m"  # each broker and MirrorMaker: three JVMs share two cores with the services
SCENARIOS = ("realtime_chat",) * 6 + ("emotion_analysis",) * 3 + ("morning_brief",)
DEADLINE_MS = 600_000  # nothing may expire while MirrorMaker is down: the test is about loss
OUTCOME_WAIT_S = 300.0


@dataclass
class TwoRegions:
    prefix: str
    eu: LocalBroker
    central: LocalBroker
    mirror: LocalMirrorMaker
    backend_url: str
    dispatcher_url: str
    results_eu_url: str
    results_eu_metrics_url: str
    work: Path

    def eu_settings(self) -> KafkaSettings:
        return KafkaSettings(bootstrap_servers=self.eu.bootstrap, topic_prefix=self.prefix)


@pytest.fixture(scope="module")
def regions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoRegions]:
    work = tmp_path_factory.mktemp("mirror")
    prefix = f"m{uuid.uuid4().hex[:10]}"
    with (
        broker_on_free_ports(work / "eu", keep_home=True, heap=HEAP) as eu,
        broker_on_free_ports(work / "central", keep_home=True, heap=HEAP) as central,
    ):
        for broker in (eu, central):
            create_topics(
                KafkaSettings(bootstrap_servers=broker.bootstrap, topic_prefix=prefix), regions=["eu"]
            )
        mirror = LocalMirrorMaker(
            MirrorConfig(
                home=work / "mm2",
                central=central.bootstrap,
                regions={"eu": eu.bootstrap},
                topic_prefix=prefix,
                heap=HEAP,
                project_root=find_project_root(Path(__file__)),
            )
        )
        ports = {
            "backend": free_port(),
            "dispatcher": free_port(),
            "results-eu": free_port(),
            "results-eu-metrics": free_port(),
        }
        common = {
            "INFERQ_TOPIC_PREFIX": prefix,
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
        }
        at_central = common | {"KAFKA_BOOTSTRAP_SERVERS": central.bootstrap}
        processes = [
            ServiceProcess(
                "backend",
                ["sim-backend", "--speed", "20", "--port", str(ports["backend"])],
                work / "backend.log",
            ),
            ServiceProcess(
                "dispatcher",
                ["dispatcher", "--port", str(ports["dispatcher"])],
                work / "dispatcher.log",
                env=at_central
                | {
                    "INFERQ_DISPATCHER_BACKEND_URL": f"http://127.0.0.1:{ports['backend']}/v1",
                    "INFERQ_DISPATCHER_GROUP_ID": f"{prefix}-dispatcher",
                },
            ),
            # The eu results service reads eu's cluster only.
            ServiceProcess(
                "results-eu",
                [
                    "results",
                    "--region",
                    "eu",
                    "--port",
                    str(ports["results-eu"]),
                    "--metrics-port",
                    str(ports["results-eu-metrics"]),
                ],
                work / "results-eu.log",
                env=common
                | {
                    "KAFKA_BOOTSTRAP_SERVERS": eu.bootstrap,
                    "INFERQ_RESULTS_GROUP_ID": f"{prefix}-results",
                    "INFERQ_RESULTS_DB_PATH": str(work / "eu.db"),
                },
            ),
        ]
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        try:
            mirror.start(timeout_s=180.0)
            for proc in processes:
                proc.start()
            processes[0].wait_http_ready(f"{urls['backend']}/healthz", READY_S)
            processes[1].wait_http_ready(
                f"{urls['dispatcher']}/healthz", READY_S, lambda r: r.json().get("assigned", 0) > 0
            )
            processes[2].wait_http_ready(
                f"{urls['results-eu']}/healthz", READY_S, lambda r: r.json().get("status") == "ok"
            )
            yield TwoRegions(
                prefix,
                eu,
                central,
                mirror,
                urls["backend"],
                urls["dispatcher"],
                urls["results-eu"],
                urls["results-eu-metrics"],
                work,
            )
        finally:
            codes = {proc.name: proc.stop() for proc in reversed(processes)}
            mirror.stop()
        assert all(code == 0 for code in codes.values()), f"unclean exits: {codes}"


async def submit(client: InferqClient, request_ids: list[str], *, pause_s: float) -> None:
    """Each id as one request, a scenario of the mix in turn, paced: a stream, not a burst."""
    for n, request_id in enumerate(request_ids):
        scenario = SCENARIOS[n % len(SCENARIOS)]
        await client.submit(
            scenario, marked_content(request_id), request_id=request_id, deadline_ms=DEADLINE_MS
        )
        await asyncio.sleep(pause_s)  # pacing the producer, not waiting for anything to happen


async def outcomes(client: InferqClient, request_ids: list[str]) -> dict[str, str]:
    results = await asyncio.gather(*(client.transport.wait(rid, OUTCOME_WAIT_S) for rid in request_ids))
    return {rid: (o.status if o is not None else "NONE") for rid, o in zip(request_ids, results, strict=True)}


def copies_on(bootstrap: str, topics: list[str]) -> Counter[str]:
    """How many records of each request id the topics hold (read to their end)."""
    codec = request_codec()
    found: Counter[str] = Counter()
    for topic in topics:
        expect = sum(end_offsets(bootstrap, topic).values())
        records = read_all(bootstrap, topic, expect=expect, timeout_s=60.0)
        assert len(records) == expect, f"{topic}: read {len(records)} of {expect}"
        found.update(codec.decode(m.value()).request_id for m in records)
    return found


def keys_on(bootstrap: str, topic: str) -> Counter[str]:
    expect = sum(end_offsets(bootstrap, topic).values())
    records = read_all(bootstrap, topic, expect=expect, timeout_s=60.0)
    assert len(records) == expect
    return Counter(m.key().decode() for m in records)


def served(regions: TwoRegions) -> dict[str, int]:
    body = httpx.get(f"{regions.backend_url}/timings", timeout=10.0).json()
    return {str(k): int(v) for k, v in body["served"].items()}


def stored_in_eu(regions: TwoRegions, request_ids: list[str]) -> dict[str, str]:
    statuses = {}
    with httpx.Client(base_url=regions.results_eu_url, timeout=40.0) as http:
        for rid in request_ids:
            response = http.get(f"/v1/requests/{rid}", params={"wait": 30})
            statuses[rid] = (
                response.json()["status"] if response.status_code == 200 else str(response.status_code)
            )
    return statuses


def test_requests_produced_in_eu_are_served_centrally_and_answered_in_eu(regions: TwoRegions) -> None:
    run = f"calm-{uuid.uuid4().hex[:8]}"
    ids = [f"{run}-{n}" for n in range(20)]

    async def scenario() -> dict[str, str]:
        async with InferqClient(KafkaTransport(regions.eu_settings(), region="eu")) as client:
            await submit(client, ids, pause_s=0.02)
            return await outcomes(client, ids)

    assert asyncio.run(scenario()) == dict.fromkeys(ids, "OK")
    # They ran centrally: the backend, which only the central dispatcher calls, served each.
    assert all(served(regions).get(rid, 0) >= 1 for rid in ids)
    # The eu results service (reading eu only) has each of them.
    assert stored_in_eu(regions, ids) == dict.fromkeys(ids, "OK")
    # The dispatcher wrote to central's eu reply topic, never to the default one.
    central_results = keys_on(regions.central.bootstrap, f"{regions.prefix}.results.eu")
    assert set(ids) <= set(central_results)
    assert sum(end_offsets(regions.central.bootstrap, f"{regions.prefix}.results").values()) == 0


def test_mirrormaker_killed_mid_stream_loses_nothing_and_each_caller_gets_one_outcome(
    regions: TwoRegions,
) -> None:
    run = f"kill-{uuid.uuid4().hex[:8]}"
    ids = [f"{run}-{n}" for n in range(300)]
    before, during, after = ids[:120], ids[120:200], ids[200:]
    figures: dict[str, float] = {}

    async def scenario() -> dict[str, str]:
        async with InferqClient(KafkaTransport(regions.eu_settings(), region="eu")) as client:
            await submit(client, before, pause_s=0.03)
            regions.mirror.kill()  # SIGKILL while records stream through it
            killed_at = time.monotonic()
            await submit(client, during, pause_s=0.03)  # eu keeps accepting: they wait in eu
            restart = asyncio.create_task(asyncio.to_thread(regions.mirror.start, 180.0))
            await submit(client, after, pause_s=0.03)
            figures["mirror_restart_s"] = await restart
            got = await outcomes(client, ids)
            figures["kill_to_all_outcomes_s"] = time.monotonic() - killed_at
            return got

    got = asyncio.run(scenario())
    # Nothing lost: every caller got an outcome, OK, exactly once (the client keeps the first).
    assert got == dict.fromkeys(ids, "OK")

    central = copies_on(
        regions.central.bootstrap, [f"{regions.prefix}.requests.{t}" for t in ("high", "medium", "low")]
    )
    mirrored_twice = sum(central[rid] - 1 for rid in ids)

    # The extra copies may still be in the dispatcher's hands (each is skipped or served): wait,
    # bounded, until it has dealt with all of them.
    def dealt_with() -> tuple[dict[str, int], int, float]:
        calls = served(regions)
        served_twice = sum(calls.get(rid, 0) - 1 for rid in ids if calls.get(rid, 0) > 1)
        return (
            calls,
            served_twice,
            metric_sum(f"{regions.dispatcher_url}/metrics", "inferq_request_copies_skipped_total"),
        )

    calls, served_twice, skipped = wait_until(
        dealt_with,
        f"the {mirrored_twice} extra copies served again or skipped",
        60.0,
        interval_s=0.5,
        done=lambda seen: seen[1] + seen[2] >= mirrored_twice,
    )
    on_eu = keys_on(regions.eu.bootstrap, f"{regions.prefix}.results.eu")
    assert set(ids) <= set(central), "a request never reached the central cluster"
    assert set(ids) <= set(on_eu), "an outcome never came back to eu"
    # The bound: the backend runs a request at most once per copy that reached central.
    for rid in ids:
        assert 1 <= calls.get(rid, 0) <= central[rid], (rid, calls.get(rid), central[rid])
    assert served_twice <= mirrored_twice
    # Each extra copy was either skipped by the dispatcher (the same request answered OK there
    # already: services/dispatcher/answered.py) or served again (read while the first still ran).
    assert served_twice + skipped == mirrored_twice
    # Only what the killed MirrorMaker had copied can be copied again: requests produced while it
    # was down or after its restart reach central once, and run once.
    assert [rid for rid in during + after if central[rid] != 1 or calls[rid] != 1] == []

    # The eu results service keeps one outcome per request id and counts the repeats.
    assert stored_in_eu(regions, ids) == dict.fromkeys(ids, "OK")
    repeats_on_eu = sum(on_eu[rid] - 1 for rid in ids)
    figures |= {
        "requests": len(ids),
        "copies_on_central": sum(central[rid] for rid in ids),
        "mirrored_twice": mirrored_twice,
        "served_twice_by_backend": served_twice,
        "copies_skipped_by_dispatcher": skipped,
        "outcomes_on_eu_reply_topic": sum(on_eu[rid] for rid in ids),
        "repeated_outcomes_on_eu": repeats_on_eu,
    }
    # The last repeats may still be on their way through the eu results service's consumer.
    figures["results_duplicates_total_eu"] = wait_until(
        lambda: metric_sum(f"{regions.results_eu_metrics_url}/metrics", "inferq_results_duplicates_total"),
        f"eu's inferq_results_duplicates_total at {repeats_on_eu}",
        60.0,
        interval_s=0.5,
        done=lambda count: count >= repeats_on_eu,
        detail=lambda: f"mirror chaos figures: {json.dumps(figures, sort_keys=True)}",
    )
    print("mirror chaos figures:", json.dumps(figures, sort_keys=True))
    # Every repeat the topic holds was read and dropped by id (its group read the whole topic).
    assert figures["results_duplicates_total_eu"] >= repeats_on_eu
