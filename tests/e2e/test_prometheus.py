"""A real Prometheus scraping the running pipeline: the rules of infra/prometheus/alerts.yml and the
panels of infra/grafana/inferq-dashboard.json against what the services really expose.

One pipeline (the services as processes, a backend that fails some calls) and one Prometheus
(Debian's binary, scrapes and rule evaluations every second) for the module. Traffic runs first:
a mixed workload, a request that expires, a refused one and a poison record, so every panel has
something to show. The last test stops the dispatcher and floods LOW at ingest until its backlog
passes 70% of its (small) capacity, and waits for the backlog alert through `/api/v1/alerts`.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.tools.demo.workload import evening_mix, submit_all, wait_outcomes
from inferq.tools.report.effective import query_range
from inferq.tools.stack.pipeline import Pipeline
from tests.support.kafka import produce
from tests.support.pipeline import running_pipeline
from tests.support.prometheus import Prometheus, config_for, running_prometheus

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "infra" / "grafana" / "inferq-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"
LOW_CAPACITY = 20


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path_factory.mktemp("prom-pipeline"),
        name="prom",
        budget=4,
        # Some calls fail (500/503): retries and backend errors to show; a fixed seed.
        backend_args=["--speed", "10", "--error-rate", "0.25", "--seed", "7"],
        extra_env={
            "INFERQ_INGEST_BACKLOG_CAPACITY": json.dumps({"LOW": LOW_CAPACITY}),
            # The errors would cut the budget for many seconds: not what these tests look at.
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
        },
    ) as stack:
        yield stack


@pytest.fixture(scope="module")
def prometheus(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    config = config_for(
        {
            "inferq-ingest": [f"127.0.0.1:{pipeline.ports.ingest_metrics}"],
            "inferq-results": [f"127.0.0.1:{pipeline.ports.results_metrics}"],
            "inferq-dispatcher": [f"127.0.0.1:{pipeline.ports.dispatcher}"],
        }
    )
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), config) as prom:
        prom.wait_for(
            "every target scraped and up",
            lambda: len([r for r in prom.query('up{job=~"inferq-.*"} == 1')]) == 3,
        )
        yield prom


@pytest.fixture(scope="module")
def traffic(pipeline: Pipeline, prometheus: Prometheus) -> dict[str, dict[str, Any]]:
    """The evening mix (some calls failing, retried), a chat request that can only expire, a
    request refused at ingest, and a poison record on the LOW topic; returns the outcomes."""
    accepted = asyncio.run(submit_all(pipeline.ingest_url, evening_mix()))
    late = httpx.post(
        f"{pipeline.ingest_url}/v1/requests",
        json={"scenario": "realtime_chat", "deadline_ms": 1, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert late.status_code == 202, late.text
    refused = httpx.post(f"{pipeline.ingest_url}/v1/requests", json={"scenario": "x"}, timeout=10)
    assert refused.status_code == 422
    produce(pipeline.bootstrap, f"{pipeline.topic_prefix}.requests.low", [b"\x00not avro"])
    ids = [a["request_id"] for a in accepted] + [late.json()["request_id"]]
    outcomes = asyncio.run(wait_outcomes(pipeline.results_url, ids, timeout_s=60))
    assert set(outcomes) == set(ids)
    assert outcomes[late.json()["request_id"]]["status"] == "EXPIRED"
    return outcomes


def dashboard_targets() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_dashboard_has_the_panels_operators_need():
    titles = " | ".join(title for title, _ in dashboard_targets()).lower()
    for needed in (
        "queue wait p50 / p95 / p99",
        "throughput by outcome",
        "budget in use vs effective",
        "backlog",
        "consumer lag",
        "backend",
        "expired",
    ):
        assert needed in titles, needed
    for _, expr in dashboard_targets():
        assert "inferq_" in expr or expr.startswith("up"), expr


def test_every_panel_query_returns_series_while_the_pipeline_runs(
    prometheus: Prometheus, traffic: dict[str, dict[str, Any]]
) -> None:
    assert {o["status"] for o in traffic.values()} >= {"OK", "EXPIRED"}
    pending = dict.fromkeys(dashboard_targets())

    def every_query_answers() -> bool:
        for title, expr in list(pending):
            # A query Prometheus refuses fails here at once (the API answers status "error").
            if prometheus.query(expr):
                pending.pop((title, expr))
        return not pending

    try:
        prometheus.wait_for("series for every panel query", every_query_answers, timeout_s=45)
    except AssertionError as exc:
        raise AssertionError(f"panel queries without series: {list(pending)}") from exc


def test_every_scraped_inferq_metric_is_documented(prometheus: Prometheus, traffic: dict[str, Any]) -> None:
    documented = set(re.findall(r"^\| `(inferq_[a-z0-9_]+)` \|", OPERATIONS.read_text(), flags=re.MULTILINE))
    names = prometheus.api("label/__name__/values")
    scraped = {re.sub(r"_(bucket|count|sum)$", "", n) for n in names if n.startswith("inferq_")}
    assert len(scraped) >= 20, scraped
    assert scraped - documented == set()


def test_the_report_reads_the_effective_budget_from_this_prometheus(
    pipeline: Pipeline, prometheus: Prometheus, traffic: dict[str, Any]
) -> None:
    now_ms = int(time.time() * 1000)
    with httpx.Client(timeout=10) as client:
        steps = query_range(prometheus.url, now_ms - 20_000, now_ms, client=client)
    assert steps is not None
    # The adaptive controller is off here: the effective budget is the configured one throughout.
    assert set(steps.values) == {float(pipeline.budget)}


def test_backlog_alert_goes_pending_or_firing_when_low_piles_up(
    pipeline: Pipeline, prometheus: Prometheus, traffic: dict[str, Any]
) -> None:
    def backlog_alerts() -> list[dict[str, Any]]:
        return [
            a for a in prometheus.alerts() if a["labels"]["alertname"] == "InferqBacklogAboveCapacityShare"
        ]

    assert backlog_alerts() == []  # all answered: nothing piles up yet
    pipeline.dispatchers[0].stop()  # nobody drains the queue any more
    accepted = 0
    with httpx.Client(base_url=pipeline.ingest_url, timeout=10) as client:
        for i in range(60):
            response = client.post(
                "/v1/requests",
                json={"scenario": "morning_brief", "messages": [{"role": "user", "content": f"brief {i}"}]},
            )
            assert response.status_code in (202, 429), response.text
            accepted += response.status_code == 202
            if response.status_code == 429:
                break  # full: admission refuses LOW from here on
    assert accepted > 0.7 * LOW_CAPACITY

    alerts = prometheus.wait_for("the LOW backlog alert", backlog_alerts, timeout_s=30)
    assert [a["labels"]["tier"] for a in alerts] == ["LOW"]
    assert alerts[0]["state"] in ("pending", "firing")
    assert float(alerts[0]["value"]) > 0.7
    # And the dispatcher's scrape failing is seen too.
    down = prometheus.wait_for(
        "the dispatcher target down",
        lambda: [a for a in prometheus.alerts() if a["labels"]["alertname"] == "InferqTargetDown"],
        timeout_s=30,
    )
    assert down[0]["labels"]["job"] == "inferq-dispatcher"
