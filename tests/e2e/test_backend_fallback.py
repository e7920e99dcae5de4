"""Several backends with a circuit breaker, through the whole pipeline: with two simulated backends,
every tier calling "default" first and "spare" next, an outage of "default" moves the traffic to
"spare" with every request answered OK, and once "default" is back a probe call brings the traffic
back to it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from tests.support.ledger import Ledger, request_body
from tests.support.pipeline import running_pipeline
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka

FAILURES = 3
OPEN_S = 1.0
BOTH = ["default", "spare"]


def set_outage(url: str, on: bool) -> None:
    assert httpx.post(f"{url}/admin/faults", json={"outage": on}, timeout=5).json()["outage"] is on


def answered(url: str) -> int:
    """Calls the simulated backend at `url` answered 200."""
    stats = httpx.get(f"{url}/stats", timeout=5).json()
    return int(stats["by_status"].get("200", 0))


def refused(url: str) -> int:
    return int(httpx.get(f"{url}/stats", timeout=5).json()["by_status"].get("503", 0))


def circuit_state(metrics_url: str, backend: str) -> float:
    text = httpx.get(f"{metrics_url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("inferq_backend_circuit_state{") and f'backend="{backend}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no circuit state for {backend} in /metrics")


def until_half_open(metrics_url: str, backend: str) -> None:
    """Wait (bounded) for `backend`'s pause to end: until then a start passes it over."""
    wait_until(
        lambda: circuit_state(metrics_url, backend) == 1,
        f"{backend}'s circuit half-open",
        OPEN_S + 10,
        interval_s=0.05,
    )


def a_mix(label: str, count: int) -> list[dict[str, object]]:
    scenarios = ("realtime_chat", "emotion_analysis", "morning_brief")
    return [request_body(scenarios[i % 3], f"{label}{i}", deadline_ms=120_000) for i in range(count)]


def test_an_outage_of_the_first_backend_moves_every_tier_to_the_next_and_a_probe_brings_it_back(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path,
        name="fallback",
        spare_backends=("spare",),
        backend_args=["--speed", "10"],
        extra_env={
            "INFERQ_DISPATCHER_TIER_BACKENDS": json.dumps({t: BOTH for t in ("HIGH", "MEDIUM", "LOW")}),
            "INFERQ_DISPATCHER_BREAKER_FAILURES": str(FAILURES),
            "INFERQ_DISPATCHER_BREAKER_OPEN_S": str(OPEN_S),
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
        },
    ) as stack:
        primary, spare = stack.backend_url, stack.spare_url("spare")
        ledger = Ledger("fallback")

        def served(bodies: list[dict[str, object]]) -> list[str]:
            answers = asyncio.run(ledger.submit_all(stack.ingest_url, bodies))
            assert {a.status for a in answers} == {202}
            ids = [a.request_id for a in answers if a.request_id is not None]
            asyncio.run(ledger.collect(stack.results_url, 60, ids=ids))
            statuses = [ledger.outcomes.get(rid, {}).get("status") for rid in ids]
            assert statuses == ["OK"] * len(ids), [ledger.outcomes.get(rid) for rid in ids]
            return ids

        # "default" down: every request still ends OK, served by "spare".
        set_outage(primary, True)
        during = served(a_mix("during", 30))
        assert answered(primary) == 0
        assert answered(spare) == len(during)
        # The breaker opened after FAILURES failures; after that only probes (one per pause) reached it.
        assert FAILURES <= refused(primary) <= FAILURES + 10 + 2 * 60 / OPEN_S
        assert circuit_state(stack.dispatcher_url(0), "default") >= 1  # open, or half-open: not closed
        assert circuit_state(stack.dispatcher_url(0), "spare") == 0

        # "default" back: after its pause the next call probes it, and its answer brings the traffic back.
        # The last failure may have reopened it just before the "during" outcomes came in: a request
        # sent within its pause would go to "spare", so the probe is sent once the pause is over.
        set_outage(primary, False)
        until_half_open(stack.dispatcher_url(0), "default")
        probe = served(a_mix("probe", 1))
        assert answered(primary) == len(probe)
        spare_before = answered(spare)
        after = served(a_mix("after", 30))
        assert answered(primary) == len(probe) + len(after)
        assert answered(spare) == spare_before
        assert circuit_state(stack.dispatcher_url(0), "default") == 0
