"""`inferq simulate`: the discrete-event simulation over the dispatcher's own scheduling code,
on traces small enough to follow by hand."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferq.dispatcher.schedule import Schedule
from inferq.messaging.tiers import Tier
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.timeseries import tokens_in_use
from inferq.tools.simulation.backend_latency import mean_inference_s, parse_latency
from inferq.tools.simulation.simulate import SimConfig, SimResult, sim_scheduler, simulate
from inferq.tools.traces.errors import TraceError
from inferq.tools.traces.files import Arrival, load_trace

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
# 2024-01-01 20:00 UTC: the default schedule's evening peak.
PEAK_MS = int(datetime(2024, 1, 1, 20, tzinfo=UTC).timestamp() * 1000)
EARLY_DROP_MS = SimConfig().early_drop_ms


def arrival(rid: str, tier: Tier, at_ms: int, deadline_ms: int | None = None) -> Arrival:
    """Arriving `at_ms` after the peak's start; `deadline_ms` None: the tier's default."""
    return Arrival(at_ms, "unknown", tier, deadline_ms, request_id=rid, start_ms=PEAK_MS)


def when(a: Arrival) -> tuple[str, Tier, int, int, str]:
    return (a.request_id, a.tier, a.created_at_ms, a.expire_at_ms, a.scenario)


def run(
    arrivals: list[Arrival],
    *,
    policy: str = "inferq",
    budget: int = 10,
    latency: dict[Tier, float] | None = None,
    pin: str | None = "peak",
    **config: Any,
) -> SimResult:
    schedule = Schedule.default(budget=budget).pin(pin)
    return simulate(
        arrivals,
        sim_scheduler(policy, schedule),
        latency or {H: 0.5, M: 2.8, L: 5.0},
        SimConfig(budget=budget, **config),
    )


def by_id(result: SimResult) -> dict[str, MeasuredRequest]:
    return {o.request_id: o for o in result.outcomes}


def waits_s(result: SimResult, tier: Tier) -> list[float]:
    return [
        (o.dispatched_ms - o.enqueued_ms) / 1000
        for o in result.outcomes
        if o.tier is tier and o.dispatched_ms is not None
    ]


# -- hand-checked timelines ----------------------------------------------------------------------

ONE_SLOT_LATENCY = {H: 1.0, M: 2.0, L: 4.0}
THREE = [arrival("low", L, 0), arrival("medium", M, 1_000), arrival("high", H, 2_000)]


def test_one_slot_serves_the_higher_tier_first_when_the_slot_frees() -> None:
    # t=0 LOW starts (until 4 s); MEDIUM (t=1) and HIGH (t=2) wait; at 4 s HIGH goes first (until
    # 5 s), then MEDIUM: waits 0, 2 and 4 s.
    out = by_id(run(THREE, budget=1, latency=ONE_SLOT_LATENCY))
    assert {rid: ((o.dispatched_ms or 0) - PEAK_MS, o.completed_ms - PEAK_MS) for rid, o in out.items()} == {
        "low": (0, 4_000),
        "high": (4_000, 5_000),
        "medium": (5_000, 7_000),
    }
    assert {o.status for o in out.values()} == {"OK"}


def test_one_slot_fifo_serves_in_arrival_order() -> None:
    out = by_id(run(THREE, policy="fifo", budget=1, latency=ONE_SLOT_LATENCY))
    waits = {rid: (o.dispatched_ms or 0) - o.enqueued_ms for rid, o in out.items()}
    assert waits == {"low": 0, "medium": 3_000, "high": 4_000}


def test_static_idles_capacity_that_inferq_lends_to_medium() -> None:
    # Ten analyses at once, peak: static caps MEDIUM at its floor (3), inferq lends up to 8.
    burst = [arrival(f"m{i}", M, 0) for i in range(10)]
    inferq, static = run(burst), run(burst, policy="static")
    assert sorted(waits_s(inferq, M)) == [0.0] * 8 + [2.8] * 2
    assert sorted(waits_s(static, M)) == [0.0] * 3 + [2.8] * 3 + [5.6] * 3 + [8.4]
    assert sum(waits_s(inferq, M)) / 10 == pytest.approx(0.56)
    assert sum(waits_s(static, M)) / 10 == pytest.approx(3.36)
    assert (inferq.max_in_flight, static.max_in_flight) == (8, 3)


def test_fifo_lets_a_low_dump_delay_chat() -> None:
    # 20 briefs (2 s each) at t=0, one chat at 0.1 s. inferq: LOW may use 1 slot at peak, chat starts
    # at once. FIFO: the briefs are older, fill all 10 slots twice; chat starts at 4 s.
    trace = [arrival(f"b{i}", L, 0) for i in range(20)] + [arrival("chat", H, 100)]
    latency = {H: 0.5, M: 2.8, L: 2.0}
    assert waits_s(run(trace, latency=latency), H) == [0.0]
    assert waits_s(run(trace, policy="fifo", latency=latency), H) == [3.9]


def test_a_request_past_its_deadline_is_answered_expired_without_a_call() -> None:
    # One slot held 10 s by a brief; a chat arriving at 1 s (deadline 6 s) cannot start in time. With
    # early drop (0.5 s) it is doomed from 5.501 s: the sweep on the 250 ms grid answers it at 5.75 s.
    trace = [arrival("brief", L, 0), arrival("chat", H, 1_000)]
    latency = {H: 0.5, M: 2.8, L: 10.0}
    chat = by_id(run(trace, budget=1, latency=latency))["chat"]
    assert (chat.status, chat.dispatched_ms, chat.completed_ms - PEAK_MS) == ("EXPIRED", None, 5_750)
    late = by_id(run(trace, budget=1, latency=latency, early_drop_ms={}))["chat"]
    assert (late.status, late.completed_ms - PEAK_MS) == ("EXPIRED", 6_000)


def test_a_doomed_request_is_not_started_when_a_slot_frees_between_sweeps() -> None:
    # The chat is doomed from 5.501 s (next sweep 5.75 s); the slot frees at 5.6 s: checked at start.
    trace = [arrival("brief", L, 0), arrival("chat", H, 1_000)]
    chat = by_id(run(trace, budget=1, latency={H: 0.5, M: 2.8, L: 5.6}))["chat"]
    assert (chat.status, chat.dispatched_ms, chat.completed_ms - PEAK_MS) == ("EXPIRED", None, 5_600)


def test_a_request_already_expired_on_arrival_is_answered_at_intake() -> None:
    out = by_id(run([arrival("stale", H, 300, deadline_ms=0)]))["stale"]
    assert (out.status, out.dispatched_ms, out.completed_ms - PEAK_MS) == ("EXPIRED", None, 300)


def test_requests_waiting_beyond_the_read_ahead_expire_when_fetched() -> None:
    # Read-ahead of 1 per tier, one slot busy 10 s: the chats behind wait "in Kafka" and are answered
    # EXPIRED; none of them ever takes a token.
    trace = [arrival("brief", L, 0)] + [arrival(f"c{i}", H, 10) for i in range(5)]
    result = run(trace, budget=1, latency={H: 0.5, M: 2.8, L: 10.0}, readahead_per_tier=1)
    chats = [o for o in result.outcomes if o.tier is H]
    assert {o.status for o in chats} == {"EXPIRED"}
    assert all(o.dispatched_ms is None for o in chats)


def test_starved_low_is_promoted_and_borrows_as_medium() -> None:
    # Peak: LOW is capped at 1 slot. After the promotion age (5 s) the waiting briefs are scheduled as
    # MEDIUM (ceiling 8) and start on the next housekeeping tick.
    trace = [arrival(f"b{i}", L, 0) for i in range(3)]
    result = run(trace, latency={H: 0.5, M: 2.8, L: 60.0}, promotion_age_ms=5_000)
    assert sorted((o.dispatched_ms or 0) - PEAK_MS for o in result.outcomes) == [0, 5_000, 5_000]
    assert result.promoted == 2


def test_a_window_change_takes_effect_with_nothing_arriving_or_completing() -> None:
    # Unpinned schedule: peak ends at 22:00 (LOW ceiling 1 -> 2). Briefs from 21:59 taking 5 min:
    # the second starts at 22:00 sharp, not when the first completes.
    at_2159 = int(datetime(2024, 1, 1, 21, 59, tzinfo=UTC).timestamp() * 1000) - PEAK_MS
    trace = [arrival(f"b{i}", L, at_2159) for i in range(2)]
    result = run(trace, latency={H: 0.5, M: 2.8, L: 300.0}, pin=None)
    assert sorted(waits_s(result, L)) == [0.0, 60.0]


# -- properties -------------------------------------------------------------------------------------

arrivals_strategy = st.lists(
    st.tuples(st.integers(0, 20_000), st.sampled_from(list(Tier)), st.integers(0, 40_000), st.booleans()),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    raw=arrivals_strategy,
    budget=st.integers(1, 6),
    policy=st.sampled_from(["inferq", "static", "fifo"]),
    latency=st.tuples(*[st.floats(0.05, 8.0)] * 3),
    readahead=st.integers(1, 5),
)
def test_never_more_than_the_budget_in_flight_and_every_request_answered_once(
    raw: list[tuple[int, Tier, int, bool]],
    budget: int,
    policy: str,
    latency: tuple[float, float, float],
    readahead: int,
) -> None:
    trace = [
        arrival(f"r{i}", tier, at, deadline if short else None)
        for i, (at, tier, deadline, short) in enumerate(raw)
    ]
    result = run(
        trace,
        policy=policy,
        budget=budget,
        latency=dict(zip(Tier, latency, strict=True)),
        readahead_per_tier=readahead,
    )
    assert [o.request_id for o in result.outcomes] == [a.request_id for a in trace]
    assert result.max_in_flight <= budget
    assert tokens_in_use(result.outcomes).peak <= budget
    for o, a in zip(result.outcomes, trace, strict=True):
        assert o.status in {"OK", "EXPIRED"}
        if o.status == "OK":
            assert o.dispatched_ms is not None
            assert o.enqueued_ms <= o.dispatched_ms
            # Nothing starts with less time left than its tier's typical inference (early drop).
            assert a.expire_at_ms - o.dispatched_ms >= max(1, EARLY_DROP_MS[o.tier])
        else:
            assert o.dispatched_ms is None


def test_same_seed_same_result_and_jitter_changes_latencies() -> None:
    trace = [arrival(f"r{i}", tier, i * 150) for i, tier in enumerate([H, M, L, H, M, H] * 30)]
    first, again = run(trace, jitter=0.3, seed=7), run(trace, jitter=0.3, seed=7)
    assert first == again
    other = run(trace, jitter=0.3, seed=8)
    assert other.outcomes != first.outcomes
    exact = run(trace)
    means = mean_inference_s(exact.outcomes)
    assert means == {H: 0.5, M: 2.8, L: 5.0}
    jittered = mean_inference_s(first.outcomes)
    assert jittered != means and jittered[H] == pytest.approx(0.5, rel=0.25)


def test_ten_thousand_requests_all_answered() -> None:
    trace = [arrival(f"r{i}", (H, H, M)[i % 3], i * 170) for i in range(9_000)]
    trace += [arrival(f"b{i}", L, 0) for i in range(1_000)]
    result = run(trace)
    assert len(result.outcomes) == 10_000
    assert sum(o.status == "OK" for o in result.outcomes) == 10_000


# -- traces and latency options --------------------------------------------------------------------


def test_an_arrivals_epoch_times_follow_its_anchor_and_deadline() -> None:
    generated = Arrival(1_500, "morning_brief", L, kind="dump")
    assert (generated.created_at_ms, generated.expire_at_ms) == (1_500, 1_500 + 12 * 3_600_000)
    anchored = replace(generated, start_ms=PEAK_MS, deadline_ms=60_000)
    assert (anchored.created_at_ms, anchored.expire_at_ms) == (PEAK_MS + 1_500, PEAK_MS + 61_500)
    assert anchored != generated and replace(anchored, start_ms=0, deadline_ms=None) == generated
    with pytest.raises(ValueError, match="kind must be one of"):
        Arrival(0, "x", H, kind="steady")


def test_trace_offset_and_absolute_forms_refused_lines_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    lines = [
        {"offset_ms": 250, "scenario": "emotion_analysis", "request_id": "a"},
        {"offset_ms": 100, "tier": "LOW", "deadline_ms": 60_000},
        {"created_at_ms": 5_000, "expire_at_ms": 9_000, "scenario": "surprise", "request_id": "c"},
        {"request_id": "refused", "tier": "LOW", "sent_at_ms": 4_000},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    trace = load_trace(path, start_ms=1_000)
    assert [when(a) for a in trace.arrivals] == [
        ("line-2", L, 1_100, 61_100, "unknown"),
        ("a", M, 1_250, 31_250, "emotion_analysis"),  # the tier's default deadline
        ("c", H, 5_000, 9_000, "surprise"),  # unknown scenario: HIGH
    ]
    assert {a.start_ms for a in trace.arrivals} == {1_000}
    assert [a.offset_ms for a in trace.arrivals] == [100, 250, 4_000]
    assert trace.unaccepted == {H: 0, M: 0, L: 1}
    assert trace.submitted(L) == 2


def test_a_load_generators_records_are_a_trace_of_what_was_accepted(tmp_path: Path) -> None:
    # The shape `inferq loadgen` writes: a tier hint, ingest's answer and its chosen tier.
    def record(n: int, outcome: str, **extra: Any) -> dict[str, Any]:
        return {
            "n": n, "request_id": f"lg-1:{n}", "scenario": "realtime_chat", "tier": "HIGH", "kind": "poisson",
            "session_id": "s", "offset_ms": 10 * n, "due_ms": 1_000 + 10 * n, "sent_ms": 1_001 + 10 * n,
            "answered_ms": 1_005 + 10 * n, "outcome": outcome, **extra,
        }  # fmt: skip

    path = tmp_path / "requests.jsonl"
    records = [
        record(0, "accepted", status=202, answer_tier="HIGH", expire_at_ms=6_001),
        record(1, "refused", status=429, retry_after_s=1.0),
        record(2, "accepted", status=202, answer_tier="MEDIUM", expire_at_ms=31_021),  # express upgrade
        record(3, "unavailable", status=503),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    trace = load_trace(path, start_ms=999_999_999)  # epoch send times win over offsets
    assert [when(a) for a in trace.arrivals] == [
        ("lg-1:0", H, 1_001, 6_001, "realtime_chat"),
        ("lg-1:2", M, 1_021, 31_021, "realtime_chat"),
    ]
    assert trace.unaccepted == {H: 2, M: 0, L: 0}


def test_an_offset_arrival_with_an_epoch_deadline_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps({"offset_ms": 5, "expire_at_ms": 1_700_000_000_000}) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=r"mixed.jsonl:1: .*deadline_ms"):
        load_trace(path, start_ms=0)


def test_trace_from_an_avro_container(tmp_path: Path) -> None:
    schema = {
        "type": "record",
        "name": "InferenceRequest",
        "fields": [
            {"name": "request_id", "type": "string"},
            {"name": "scenario", "type": "string"},
            {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["HIGH", "MEDIUM", "LOW"]}},
            {"name": "created_at_ms", "type": "long"},
            {"name": "expire_at_ms", "type": "long"},
        ],
    }
    records = [
        {
            "request_id": "x",
            "scenario": "realtime_chat",
            "tier": "HIGH",
            "created_at_ms": 20,
            "expire_at_ms": 5_020,
        },
        {"request_id": "y", "scenario": "batch", "tier": "LOW", "created_at_ms": 10, "expire_at_ms": 99_999},
    ]
    path = tmp_path / "requests.avro"
    with path.open("wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), records)
    trace = load_trace(path, start_ms=0)
    assert [(a.request_id, a.tier, a.created_at_ms) for a in trace.arrivals] == [("y", L, 10), ("x", H, 20)]
    # As `inferq trace export` writes them: each request inside a record saying where it was read.
    wrapped = {
        "type": "record",
        "name": "TraceRecord",
        "fields": [{"name": "timestamp_ms", "type": "long"}, {"name": "request", "type": schema}],
    }
    exported = tmp_path / "export.avro"
    with exported.open("wb") as out:
        fastavro.writer(
            out, fastavro.parse_schema(wrapped), [{"timestamp_ms": 99, "request": r} for r in records]
        )
    assert load_trace(exported, start_ms=0).arrivals == trace.arrivals


def test_latency_options_name_a_model_or_a_tier() -> None:
    assert parse_latency(["fast=0.2", "MEDIUM=3", "inferq-cheap=7.5"]) == {H: 0.2, M: 3.0, L: 7.5}
    assert parse_latency([]) == {H: 0.5, M: 2.8, L: 5.0}
    with pytest.raises(ValueError, match="unknown model or tier"):
        parse_latency(["slow=1"])
    with pytest.raises(ValueError, match="MODEL=SECONDS"):
        parse_latency(["fast"])


def test_forecast_lending_drains_a_dump_at_peak_without_leaving_chat_behind() -> None:
    """Issue 14's evening: 200 briefs dumped at 20:00 and a chat every 400 ms. The seed's peak
    ceiling drains them one at a time; with forecast lending they take the idle slots, within the
    budget, and every chat is still answered."""
    chats = [arrival(f"c{i}", Tier.HIGH, 100 + 400 * i) for i in range(150)]
    briefs = [arrival(f"b{i}", Tier.LOW, 0) for i in range(200)]
    latency = {Tier.HIGH: 0.5, Tier.MEDIUM: 2.8, Tier.LOW: 5.0}
    factory = sim_scheduler("inferq", Schedule.default(budget=10).pin("peak"))

    def low_makespan_s(result: SimResult) -> float:
        return max(o.completed_ms for o in result.outcomes if o.tier is Tier.LOW) / 1000 - PEAK_MS / 1000

    capped = simulate(chats + briefs, factory, latency)
    lending = simulate(chats + briefs, factory, latency, SimConfig(forecast_lending=True))
    assert low_makespan_s(capped) >= 990  # 200 x 5 s, one at a time
    assert low_makespan_s(lending) < low_makespan_s(capped) / 5
    assert lending.max_in_flight <= 10
    assert all(o.status == "OK" for o in lending.outcomes)


def test_forecast_lending_costs_an_analysis_surge_deadlines_the_peak_ceilings_keep() -> None:
    """Why lending is off by default (issue 22): issue 14's evening with a surge of analyses at 60 s,
    more than MEDIUM's slots serve within the deadline. The briefs lent a slot hold it for 5 s
    whatever arrives, so fewer analyses start within their 30 s than under the seed's ceilings."""
    chats = [arrival(f"c{i}", Tier.HIGH, 100 + 400 * i) for i in range(300)]
    briefs = [arrival(f"b{i}", Tier.LOW, 0) for i in range(200)]
    surge = [arrival(f"a{i}", Tier.MEDIUM, 60_000 + 100 * i) for i in range(100)]  # 10 a second for 10 s
    latency = {Tier.HIGH: 0.5, Tier.MEDIUM: 2.8, Tier.LOW: 5.0}
    factory = sim_scheduler("inferq", Schedule.default(budget=10).pin("peak"))

    def analyses_in_time(result: SimResult) -> int:
        return sum(o.tier is Tier.MEDIUM and o.status == "OK" for o in result.outcomes)

    capped = simulate(chats + briefs + surge, factory, latency)
    lending = simulate(chats + briefs + surge, factory, latency, SimConfig(forecast_lending=True))
    assert analyses_in_time(lending) < analyses_in_time(capped) < len(surge)  # 78 < 84 < 100
