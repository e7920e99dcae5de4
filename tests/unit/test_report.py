"""`inferq report`'s pure parts: statistics, time series, the table, documents and plots, on result
sets small enough to check by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferq.messaging.tiers import Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.documents import (
    RunDocument,
    load_documents,
    outcome_from_record,
    write_documents,
)
from inferq.tools.report.plots import write_plots
from inferq.tools.report.results_source import run_of
from inferq.tools.report.stats import RequestCounts, request_counts, summarize
from inferq.tools.report.table import render
from inferq.tools.report.timeseries import (
    Step,
    backlog,
    count_over_time,
    tokens_in_use,
    utilization,
    wait_points,
)
from inferq.tools.simulation.backend_latency import mean_inference_s, recorded_outcomes
from inferq.tools.traces.files import load_trace

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW


def o(rid: str, tier: Tier, enq: int, disp: int | None, done: int, status: str = "OK") -> MeasuredRequest:
    return MeasuredRequest(rid, tier, status, enq, disp, done)


# Budget 2. a runs 0-1 s; b waits 0-1 s then runs 1-2 s; c waits 0.5-3 s and expires undispatched;
# d arrives at 4 s and runs at once until 5 s. The run spans 0-5 s.
SMALL = [
    o("r:a", H, 0, 0, 1_000),
    o("r:b", H, 0, 1_000, 2_000),
    o("r:c", L, 500, None, 3_000, "EXPIRED"),
    o("r:d", M, 4_000, 4_000, 5_000),
]


def test_tokens_in_use_and_backlog_over_time() -> None:
    # At 1 s a's token is released and b's taken: no change, no step.
    assert tokens_in_use(SMALL) == Step([0, 2_000, 4_000, 5_000], [1, 0, 1, 0])
    assert tokens_in_use(SMALL, H) == Step([0, 2_000], [1, 0])
    assert backlog(SMALL) == Step([0, 500, 1_000, 3_000], [1, 2, 1, 0])
    assert backlog(SMALL, L) == Step([500, 3_000], [1, 0])
    assert backlog(SMALL).at(750) == 2 and backlog(SMALL).at(-1) == 0 and backlog(SMALL).at(9_999) == 0
    assert wait_points(SMALL, H) == [(0, 0), (0, 1_000)]


def test_count_over_time_ignores_empty_spans_and_nets_simultaneous_changes() -> None:
    assert count_over_time([(5, 5), (0, 10), (10, 20), (0, 20)]) == Step([0, 20], [2, 0])
    assert count_over_time([]).peak == 0


def test_utilization_over_the_run_and_while_work_waits() -> None:
    u = utilization(SMALL, budget=2)
    # 3 token-seconds over 5 s of budget 2; work waits 0-3 s, when 2 token-seconds were used.
    assert (u.span_ms, u.token_ms, u.waiting_ms, u.token_ms_waiting) == (5_000, 3_000, 3_000, 2_000)
    assert u.over_run == pytest.approx(0.3)
    assert u.while_waiting == pytest.approx(1 / 3)
    assert utilization([], budget=2).over_run is None


def test_failed_results_hold_no_token_in_the_series() -> None:
    # A FAILED result's dispatched..completed may span retries and backoff: not counted as in use.
    assert tokens_in_use([o("r:f", H, 0, 100, 9_000, "FAILED")]) == Step([], [])


def test_summary_per_tier() -> None:
    s = summarize(SMALL, budget=2)
    high, medium, low = s.tier(H), s.tier(M), s.tier(L)
    assert high.by_status == {"OK": 2} and low.by_status == {"EXPIRED": 1}
    assert high.queue_wait_s is not None and (high.queue_wait_s.mean, high.queue_wait_s.p50) == (0.5, 0.5)
    assert high.queue_wait_s.p95 == pytest.approx(0.95)  # rank 0.95 between 0 and 1 s
    assert high.end_to_end_s is not None and high.end_to_end_s.p99 == pytest.approx(1.99)
    assert low.queue_wait_s is None and low.end_to_end_s is None  # expired: never dispatched
    assert high.throughput_per_s == pytest.approx(2 / 5)
    assert medium.throughput_per_s == pytest.approx(1 / 5)
    assert s.low_makespan_s == 2.5  # first LOW enqueue (0.5 s) to last LOW outcome (3 s)
    assert (s.max_in_flight, s.span_s) == (1, 5.0)


def test_percentiles_of_a_hundred_and_one_waits() -> None:
    outcomes = [o(f"r:{i}", M, 0, i * 10, i * 10 + 1) for i in range(101)]  # waits 0..1000 ms
    wait = summarize(outcomes, budget=10).tier(M).queue_wait_s
    assert wait is not None
    assert (wait.count, wait.p50, wait.p95, wait.p99) == (101, 0.5, 0.95, 0.99)
    assert wait.mean == pytest.approx(0.5)


def test_request_records_count_sent_accepted_and_missing(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    lines = [
        {"request_id": "r:a", "tier": "HIGH", "sent_at_ms": 0, "created_at_ms": 0, "expire_at_ms": 5_000},
        {"request_id": "r:b", "tier": "HIGH", "sent_at_ms": 0, "created_at_ms": 0, "expire_at_ms": 5_000},
        {"request_id": "r:x", "tier": "HIGH", "sent_at_ms": 0},  # refused by ingest
        {"request_id": "r:c", "tier": "LOW", "sent_at_ms": 0, "created_at_ms": 500, "expire_at_ms": 9_000},
        {"request_id": "r:z", "tier": "LOW", "sent_at_ms": 0, "created_at_ms": 600, "expire_at_ms": 9_000},
    ]
    requests.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    counts = request_counts(load_trace(requests, start_ms=0), SMALL)
    assert counts[H] == RequestCounts(submitted=3, accepted=2, missing=0)
    assert counts[L] == RequestCounts(submitted=2, accepted=2, missing=1)
    s = summarize(SMALL, 2, counts)
    assert s.low_makespan_s is None  # a LOW request has no outcome yet
    assert "sent 3 acc 2 miss 0" in render([("r", s)])


def test_table_puts_runs_side_by_side() -> None:
    text = render([("inferq-1", summarize(SMALL, 2)), ("fifo-1", summarize(SMALL[:2], 2))])
    header, subheader = text.splitlines()[:2]
    assert header.index("inferq-1") < header.index("fifo-1")
    assert subheader.count("p95") == 2
    high_waits = next(line for line in text.splitlines() if line.startswith("HIGH queue wait s"))
    assert high_waits.split()[4:] == ["0.50", "0.50", "0.95", "0.99", "0.50", "0.50", "0.95", "0.99"]
    assert "LOW outcomes" in text and "EXP 1" in text
    assert "max in flight / budget" in text


def test_documents_round_trip_and_feed_the_latency_option(tmp_path: Path) -> None:
    doc = RunDocument(
        "simulation", "sim", 2, SMALL, {t: RequestCounts(1, 1, 0) for t in Tier}, {"policy": "fifo"}
    )
    path = tmp_path / "sim.json"
    write_documents(path, [doc])
    [loaded] = load_documents(path)
    assert (loaded.outcomes, loaded.requests, loaded.budget, loaded.params) == (
        SMALL,
        doc.requests,
        2,
        doc.params,
    )
    assert json.loads(path.read_text())["summary"]["utilization"]["over_run"] == pytest.approx(0.3)
    both = tmp_path / "report.json"
    write_documents(both, [doc, RunDocument("run", "r", 2, SMALL[:1])])
    assert [d.name for d in load_documents(both)] == ["sim", "r"]
    assert recorded_outcomes(path) == SMALL


def test_a_results_jsonl_gives_the_mean_inference_time_per_tier(tmp_path: Path) -> None:
    path = tmp_path / "results-run1.jsonl"
    records = [
        {
            "request_id": "run1:1",
            "tier": "HIGH",
            "status": "OK",
            "enqueued_at_ms": 0,
            "dispatched_at_ms": 100,
            "completed_at_ms": 500,
        },
        {
            "request_id": "run1:2",
            "tier": "HIGH",
            "status": "OK",
            "enqueued_at_ms": 0,
            "dispatched_at_ms": 100,
            "completed_at_ms": 700,
        },
        {
            "request_id": "run1:3",
            "tier": "HIGH",
            "status": "FAILED",
            "enqueued_at_ms": 0,
            "dispatched_at_ms": 0,
            "completed_at_ms": 9_000,
        },
        {
            "request_id": "run1:4",
            "tier": "LOW",
            "status": "EXPIRED",
            "enqueued_at_ms": 0,
            "dispatched_at_ms": None,
            "completed_at_ms": 9_000,
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    # Only OK calls: FAILED ones may span retries, EXPIRED ones never ran; LOW has no data at all.
    assert mean_inference_s(recorded_outcomes(path)) == {H: 0.5}


def test_result_records_become_outcomes() -> None:
    record = {
        "request_id": "run1:7",
        "tier": "MEDIUM",
        "status": "OK",
        "enqueued_at_ms": 10,
        "dispatched_at_ms": 20,
        "completed_at_ms": 30,
        "model": "inferq-accurate",
    }
    assert outcome_from_record(record) == o("run1:7", M, 10, 20, 30)
    assert run_of("run1:7", ["run10", "run1"]) == "run1"
    assert run_of("run10:7", ["run1"]) is None


def test_plots_write_non_empty_pngs(tmp_path: Path) -> None:
    runs = [RunDocument("run", "a", 2, SMALL), RunDocument("simulation", "b", 2, SMALL[:2])]
    paths = write_plots(runs, tmp_path / "out")
    assert sorted(p.name for p in paths) == [
        "backlog.png",
        "queue_wait.png",
        "tokens_in_use.png",
        "wait_percentiles.png",
    ]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5_000
