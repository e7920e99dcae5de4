"""The latency and throughput benchmarks' pure parts: markers, the join, steps, rates, /proc parsing."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from inferq.tools.bench.cpu import parse_machine_ticks, parse_process_ticks
from inferq.tools.bench.latency_report import (
    HEADLINE,
    STEPS,
    Dist,
    Placed,
    Sample,
    join,
    median_of,
    seconds_table,
    step_stats,
    target_rows,
    timeline,
    worst_seconds,
)
from inferq.tools.bench.recorder import create_app, find_marker, marked_content, marker_of
from inferq.tools.bench.throughput_report import (
    BARE,
    Measurement,
    dispatchers_label,
    median_ratio,
    rate_per_s,
)
from inferq.tools.bench.throughput_report import target_rows as throughput_targets

MS = 1_000_000  # ns


# -- the backend marker ---------------------------------------------------------------------------


def test_marker_round_trips_through_the_message_content() -> None:
    assert marker_of(marked_content("lat-run1-00042")) == "lat-run1-00042"


@pytest.mark.parametrize("content", ["hello", "", None, 42, ["inferq-bench:x"], "inferq-bench:"])
def test_content_without_a_marker_has_none(content: object) -> None:
    assert marker_of(content) is None


def test_marker_is_found_in_any_message_of_a_chat_body() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": marked_content("r1")},
        ],
    }
    assert find_marker(body) == "r1"
    assert find_marker({"messages": "not a list"}) is None
    assert find_marker(["not", "a", "dict"]) is None


def test_recorder_stamps_the_first_arrival_per_marker_and_answers_like_openai() -> None:
    ticks = iter([1_000, 2_000, 3_000])
    app = create_app(0.0, clock_ns=lambda: next(ticks))
    with TestClient(app) as client:
        body = {"model": "inferq-fast", "messages": [{"role": "user", "content": marked_content("r1")}]}
        first = client.post("/v1/chat/completions", json=body)
        client.post("/v1/chat/completions", json=body)  # a redo: the first arrival is the one kept
        client.post(
            "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
        )
        arrivals = client.get("/arrivals").json()
    assert first.status_code == 200
    assert first.json()["choices"][0]["message"]["content"] == "ok"
    assert arrivals["arrivals"] == {"r1": 1_000}
    assert (arrivals["calls"], arrivals["repeated"], arrivals["unmarked"]) == (3, 1, 1)
    assert arrivals["connections"] == 1  # the test client's one connection


# -- joining the instants and the steps -----------------------------------------------------------


def _sample(**overrides: int | None) -> Sample:
    """A request: due at 1000 ms, sent 0.5 ms late, created 1001, appended 1003, 202 at 1005,
    consumed 1004.5, dispatched 1006, received 1007.25 (ms)."""
    values: dict[str, int | None] = {
        "due_ns": 1000 * MS,
        "sent_ns": 1000 * MS + MS // 2,
        "answered_ns": 1005 * MS,
        "created_ms": 1001,
        "appended_ms": 1003,
        "consumed_ns": 1004 * MS + MS // 2,
        "dispatched_ms": 1006,
        "received_ns": 1007 * MS + MS // 4,
    }
    values.update(overrides)
    return Sample("r", **values)  # type: ignore[arg-type]


def test_each_step_is_the_difference_of_its_two_instants() -> None:
    steps = {name: step(_sample()) for name, _, step in STEPS}
    assert steps == {
        HEADLINE: pytest.approx(2.25),
        "broker append → backend received": pytest.approx(4.25),
        "append → consumed": pytest.approx(1.5),
        "consumed → dispatched": pytest.approx(1.5),
        "append → dispatched": pytest.approx(3.0),
        "dispatched → backend received": pytest.approx(1.25),
        "client: sent → 202": pytest.approx(4.5),
        "ingest: created_at_ms → broker append": pytest.approx(2.0),
    }


def test_the_breakdown_adds_up_to_append_to_backend() -> None:
    steps = {name: step(_sample()) for name, _, step in STEPS}
    parts = [
        steps["append → consumed"],
        steps["consumed → dispatched"],
        steps["dispatched → backend received"],
    ]
    assert sum(p for p in parts if p is not None) == pytest.approx(steps["broker append → backend received"])


def test_steps_needing_a_missing_instant_are_left_out_not_zero() -> None:
    no_probe = {name: step(_sample(consumed_ns=None)) for name, _, step in STEPS}
    assert no_probe["append → consumed"] is None
    assert no_probe["consumed → dispatched"] is None
    assert no_probe["append → dispatched"] == pytest.approx(3.0)
    create_time = {name: step(_sample(appended_ms=None)) for name, _, step in STEPS}
    assert create_time["broker append → backend received"] is None
    assert create_time[HEADLINE] == pytest.approx(2.25)


def test_join_keeps_complete_requests_and_names_what_is_missing() -> None:
    answered = {rid: (0, 1, 2) for rid in ("ok", "no-record", "no-backend", "no-result")}
    placed = {rid: Placed(f"t:0:{i}", 10, 11) for i, rid in enumerate(("ok", "no-backend", "no-result"))}
    joined = join(
        answered,
        placed,
        consumed_ns={"t:0:0": 12 * MS, "t:0:1": 12 * MS},  # no stamp for no-result's record
        dispatched_ms={"ok": 13, "no-record": 13, "no-backend": 13},
        received_ns={"ok": 14 * MS, "no-record": 14 * MS, "no-result": 14 * MS},
    )
    assert [s.request_id for s in joined.samples] == ["ok"]
    assert joined.samples[0].consumed_ns == 12 * MS
    assert joined.missing == {
        "record": ["no-record"],
        "backend": ["no-backend"],
        "result": ["no-result"],
        "fetch probe": ["no-result"],
    }


def test_without_the_probe_nothing_is_missing_from_it() -> None:
    joined = join({"r": (0, 1, 2)}, {"r": Placed("t:0:0", 1, 1)}, None, {"r": 3}, {"r": 4 * MS})
    assert joined.missing == {}
    assert joined.samples[0].consumed_ns is None


# -- statistics, medians and verdicts -------------------------------------------------------------


def test_step_stats_give_percentiles_and_max_per_step() -> None:
    samples = [_sample(received_ns=1005 * MS + i * MS) for i in range(1, 101)]  # added latency 1..100 ms
    head = step_stats(samples)[HEADLINE]
    assert head is not None
    assert (head.count, head.p50, head.p90, head.max) == (
        100,
        pytest.approx(50.5),
        pytest.approx(90.1),
        100.0,
    )
    assert head.p99 == pytest.approx(99.01)


def test_targets_use_the_median_of_the_runs() -> None:
    def run(p50: float, p99: float) -> dict[str, Dist | None]:
        return {HEADLINE: Dist(100, p50, 0.0, p99, p99)}

    runs = [run(4.0, 30.0), run(6.0, 20.0), run(3.0, 24.0)]
    assert median_of(runs, HEADLINE, "p50") == 4.0
    assert median_of(runs, "absent", "p50") is None
    rows = target_rows(runs)
    assert [(r[1], r[3]) for r in rows] == [(4.0, "PASS"), (24.0, "PASS")]
    rows = target_rows([run(5.1, 25.1)])
    assert [r[3] for r in rows] == ["MISS", "MISS"]


def test_timeline_buckets_by_due_second_and_shows_the_clients_own_lag() -> None:
    samples = [
        _sample(),  # second 0: added 2.25 ms, client 0.5 ms late
        _sample(due_ns=1500 * MS, sent_ns=1520 * MS, answered_ns=1525 * MS, received_ns=1600 * MS),
        _sample(due_ns=2100 * MS, sent_ns=2100 * MS, answered_ns=2102 * MS, received_ns=2103 * MS),
    ]
    seconds = timeline(samples)
    assert [(s.second, s.count) for s in seconds] == [(0, 2), (1, 1)]
    assert seconds[0].headline_max == pytest.approx(75.0)
    assert seconds[0].client_lag_max == pytest.approx(20.0)
    assert [s.second for s in worst_seconds(seconds, n=1)] == [0]
    assert seconds_table(seconds).splitlines() == [
        "| second | n | added p50 ms | added max ms | append → consumed max ms | client lag max ms |",
        "|---|---|---|---|---|---|",
        f"| 0 | 2 | {seconds[0].headline_p50:.1f} | 75.0 | {seconds[0].append_to_consumed_max:.1f} | 20.0 |",
        f"| 1 | 1 | 1.0 | 1.0 | {seconds[1].append_to_consumed_max:.1f} | 0.0 |",
    ]


# -- throughput -----------------------------------------------------------------------------------


def test_rate_counts_intervals_between_first_and_last_result() -> None:
    assert rate_per_s([1000, 1500, 2000]) == pytest.approx(2.0)
    assert rate_per_s([5, 5]) is None  # under a millisecond: unknown, not infinite
    assert rate_per_s([7]) is None


def test_ratio_to_the_bare_loop_is_taken_within_each_run() -> None:
    one = dispatchers_label(1)

    def run(inferq: float, bare: float) -> dict[str, Measurement]:
        return {one: Measurement(one, 10, 1.0, inferq), BARE: Measurement(BARE, 10, 1.0, bare)}

    # Per run 0.5, 0.8, 0.9: median 0.8 (the ratio of the median rates would be 1500 / 2000 = 0.75).
    runs = [run(1000, 2000), run(1600, 2000), run(1800, 2000)]
    assert median_ratio(runs, one, BARE) == pytest.approx(0.8)
    rows = throughput_targets(runs)
    assert [(r[1], r[3]) for r in rows] == [("1,600", "MISS"), ("0.80", "PASS")]


# -- /proc parsing --------------------------------------------------------------------------------


def test_process_ticks_survive_a_name_with_spaces_and_parentheses() -> None:
    fields = ["S", "1", "1", "1", "0", "-1", "4194560", "10", "0", "0", "0", "250", "50", "0", "0"]
    line = "1234 (python3 (x) y) " + " ".join(fields) + " 20 0 1 0 100"
    assert parse_process_ticks(line) == 300


def test_machine_ticks_count_idle_and_iowait_as_not_busy() -> None:
    stat = "cpu  100 5 50 1000 20 3 2 0 0 0\ncpu0 50 2 25 500 10 1 1 0 0 0\n"
    assert parse_machine_ticks(stat) == (160, 1180)
