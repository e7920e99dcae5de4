"""Tenants at the dispatcher, end to end: the services as processes on the real broker, records
written straight to the request topics as a Kafka-native producer would.

- a tenant the file does not list goes to the dead-letter topic with the reason;
- a record its tenant is not entitled to goes there too; one above its tier is served at its
  `max_tier`;
- a tenant removed from the file: what it asked before the reload runs, what it asks after does not;
- a flood: tenant A writes 200 LOW requests, then B 10; B's complete among the first, within
  their weighted share, not after A's backlog. Asserted on the order in which calls started
  (the results' `dispatched_at_ms`), never on how long anything took.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message

from inferq.messaging.codec import result_codec
from inferq.messaging.records import InferenceResult
from inferq.messaging.topics import TopicNames
from inferq.tools.stack.pipeline import Pipeline
from tests.support.kafka import a_request, produce_requests, read_all
from tests.support.pipeline import running_pipeline
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

FLOOD = TenantSpec("flood")
SMALL = TenantSpec("small")
NARROW = TenantSpec("narrow", max_tier="LOW", entitlements={"models": []})
BUDGET = 4


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    work_dir = tmp_path_factory.mktemp("dispatcher-tenants")
    tenants_file = write_tenants(work_dir / "tenants.toml", FLOOD, SMALL, NARROW)
    with running_pipeline(
        kafka_bootstrap,
        work_dir,
        name="e2edt",
        budget=BUDGET,
        # Fast calls: the flood drains in seconds. Night: LOW may use the whole budget (nothing else
        # waits), so the test does not depend on the hour it runs at.
        backend_args=["--speed", "50"],
        extra_env={"INFERQ_TENANTS_FILE": str(tenants_file), "INFERQ_DISPATCHER_SCHEDULE_PIN": "night"},
    ) as stack:
        yield stack


def topics(pipeline: Pipeline) -> TopicNames:
    return TopicNames(prefix=pipeline.topic_prefix)


def results_of(pipeline: Pipeline, ids: set[str], timeout_s: float = 90.0) -> dict[str, InferenceResult]:
    """The results of `ids` read from the results topic (every one, or fail after `timeout_s`)."""
    codec = result_codec()

    def answers(records: list[Message]) -> list[InferenceResult]:
        return [r for r in (codec.decode(m.value()) for m in records) if r.request_id in ids]

    seen = answers(
        read_all(
            pipeline.bootstrap,
            topics(pipeline).results,
            until=lambda records: ids <= {r.request_id for r in answers(records)},
            timeout_s=timeout_s,
        )
    )
    found = {r.request_id: r for r in seen}
    assert ids <= found.keys(), f"{len(ids - found.keys())} results missing"
    assert len(seen) == len(found), "a request answered twice"
    return found


def dead_letters(pipeline: Pipeline, expect: int) -> list[dict[str, Any]]:
    letters = read_all(pipeline.bootstrap, topics(pipeline).dlq, expect=expect, timeout_s=60)
    return [{k: (v or b"").decode() for k, v in (m.headers() or [])} for m in letters]


def test_unknown_tenant_and_entitlement_refusals_go_to_the_dead_letter_topic(pipeline: Pipeline) -> None:
    names = topics(pipeline)
    stranger = a_request("HIGH", tenant="stranger")
    wants_model = a_request("HIGH", tenant="narrow", model="inferq-accurate")
    capped = a_request("HIGH", tenant="narrow")
    produce_requests(pipeline.bootstrap, names.requests_by_name("HIGH"), [stranger, wants_model, capped])

    results = results_of(pipeline, {stranger.request_id, wants_model.request_id, capped.request_id})
    assert results[stranger.request_id].status.value == "FAILED"
    assert results[wants_model.request_id].status.value == "FAILED"
    # Narrowed, not refused: served at the tenant's highest tier.
    assert results[capped.request_id].status.value == "OK"
    assert results[capped.request_id].tier.value == "LOW"

    reasons = sorted(h["inferq.error"] for h in dead_letters(pipeline, expect=2))
    assert reasons == [
        "tenant 'narrow' is not entitled: model: not entitled to choose this model (entitled: none)",
        "tenant 'stranger' is not in the tenants file",
    ]


def test_a_flooding_tenant_does_not_push_a_small_one_behind_its_backlog(pipeline: Pipeline) -> None:
    low = topics(pipeline).requests_by_name("LOW")
    flood = [a_request("LOW", tenant="flood", deadline_ms=600_000) for _ in range(200)]
    few = [a_request("LOW", tenant="small", deadline_ms=600_000) for _ in range(10)]
    produce_requests(pipeline.bootstrap, low, flood)  # queued first
    produce_requests(pipeline.bootstrap, low, few)

    results = results_of(pipeline, {r.request_id for r in [*flood, *few]})
    assert {r.status.value for r in results.values()} == {"OK"}  # nothing lost, nothing refused
    started = sorted(results.values(), key=lambda r: (r.dispatched_at_ms or 0, r.request_id))
    positions = [i for i, r in enumerate(started) if r.tenant == "small"]
    # Equal weights: once B's requests are read, every second start of the tier is B's, so its ten
    # start within about twenty starts of being found (A's starts before that, while B was not yet
    # written, are the rest of the margin). In arrival order they would be the last ten (200..209).
    assert max(positions) < 80, positions


def test_a_removed_tenant_keeps_what_it_asked_before_the_reload(pipeline: Pipeline) -> None:
    """The file loses tenant "small": its record made before the dispatcher applied the reload
    still runs, one made after goes to the dead-letter topic as an unknown tenant's."""
    path = Path(pipeline.extra_env["INFERQ_TENANTS_FILE"])
    before = a_request("HIGH", tenant="small")  # created now, written after the reload
    [dispatcher] = pipeline.dispatchers
    write_tenants(path, FLOOD, NARROW)
    try:
        wait_until(
            lambda: "tenant 'small' removed from the tenants file" in dispatcher.log_path.read_text(),
            "the dispatcher reloading the file",
            30,
            interval_s=0.1,
        )
        after = a_request("HIGH", tenant="small")
        produce_requests(pipeline.bootstrap, topics(pipeline).requests_by_name("HIGH"), [before, after])
        results = results_of(pipeline, {before.request_id, after.request_id})
        assert results[before.request_id].status.value == "OK"
        assert results[after.request_id].status.value == "FAILED"
        assert "tenant 'small' is not in the tenants file" in (results[after.request_id].error or "")
    finally:
        write_tenants(path, FLOOD, SMALL, NARROW)
