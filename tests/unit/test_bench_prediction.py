"""The glue between the scheduling bench and the simulator: the trace as arrivals, the run's settings,
and the real-vs-simulated comparison, on inputs small enough to check by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferq.dispatcher.settings import DispatcherSettings
from inferq.ingest.settings import IngestSettings
from inferq.messaging.tiers import Tier, TierPolicy
from inferq.tools.bench.machine import MISS, NA, PASS
from inferq.tools.bench.scenarios import TraceSpec
from inferq.tools.bench.scheduling_report import (
    comparison_table,
    makespan_table,
    prediction_targets,
    run_table,
    tier_table,
)
from inferq.tools.bench.scheduling_run import (
    ANCHOR_MS,
    Prediction,
    TierPrediction,
    compressed_env,
    compressed_latency_s,
    predict,
    run_settings,
    run_specs,
    sim_arrivals,
)
from inferq.tools.bench.summary import RunSummary, Submission, tier_rows
from inferq.tools.measures import MeasuredRequest, stats, utilization
from inferq.tools.simulation.simulate import SimConfig, sim_config
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.generator import generate

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
CHAT, ANALYSIS, BRIEF = "realtime_chat", "emotion_analysis", "morning_brief"
DEADLINES = {H: 500, M: 3_000, L: 4_320_000}


def arrival(
    index: int, at_ms: int, scenario: str, kind: str = "poisson", priority: Tier | None = None
) -> Arrival:
    tier = TierPolicy().tier_for(scenario, priority)  # as the generator decides it
    return Arrival(at_ms, scenario, tier, index=index, kind=kind, session_id=f"s-{index}", priority=priority)


# -- the trace as the simulator's arrivals --------------------------------------------------------


def test_arrivals_keep_the_offsets_and_tiers_and_expire_after_the_runs_deadline() -> None:
    trace = [
        arrival(0, 0, BRIEF, "dump"),
        arrival(1, 0, BRIEF, "dump"),
        arrival(2, 1_234, CHAT),
        arrival(3, 24_000, ANALYSIS, "burst"),
    ]
    out = sim_arrivals(trace, DEADLINES, start_ms=1_000_000)
    assert [(a.request_id, a.tier, a.created_at_ms, a.expire_at_ms, a.scenario) for a in out] == [
        ("trace-00000", L, 1_000_000, 1_000_000 + 4_320_000, BRIEF),
        ("trace-00001", L, 1_000_000, 1_000_000 + 4_320_000, BRIEF),
        ("trace-00002", H, 1_001_234, 1_001_734, CHAT),
        ("trace-00003", M, 1_024_000, 1_027_000, ANALYSIS),
    ]
    # The generated arrivals themselves are left as they are: the real run sends those.
    assert [(a.start_ms, a.deadline_ms, a.request_id) for a in trace] == [(0, None, "")] * 4


def test_the_simulated_tier_is_the_one_ingest_chooses() -> None:
    unknown, express = sim_arrivals(
        [arrival(0, 500, "something_new"), arrival(1, 500, BRIEF, priority=H)], DEADLINES, start_ms=0
    )
    assert (unknown.tier, unknown.created_at_ms, unknown.expire_at_ms) == (H, 500, 1_000)
    assert (express.tier, express.expire_at_ms) == (H, 1_000)


def test_the_whole_bench_trace_converts_in_order_and_anchored_at_the_peak() -> None:
    trace = generate(TraceSpec.from_file(seed=3, duration_s=10, briefs=5).scenario())
    out = sim_arrivals(trace, DEADLINES)
    assert len(out) == len(trace)
    assert out[0].created_at_ms == ANCHOR_MS
    assert [a.created_at_ms for a in out] == sorted(a.created_at_ms for a in out)
    assert sum(1 for a in out if a.tier is L) == 5


# -- the run's settings, read from the environment the real services get -------------------------


@pytest.mark.parametrize("name", ["inferq", "inferq-lifted", "static", "fifo"])
def test_run_settings_are_what_the_runs_services_read_from_their_environment(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = run_specs(budget=10)[name]
    settings, deadlines = run_settings(spec, compress=10, budget=10)
    for var, value in compressed_env(spec, compress=10, prefix="bench.x").items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("INFERQ_BUDGET", "10")
    real = DispatcherSettings()
    for field in (
        "policy",
        "schedule_pin",
        "low_peak_ceiling",
        "promotion_age_s",
        "typical_latency_s",
        "budget",
    ):
        assert getattr(settings, field) == getattr(real, field), field
    assert deadlines == IngestSettings().deadlines_ms == DEADLINES


def test_sim_config_takes_the_compressed_early_drop_and_promotion_age() -> None:
    settings, _ = run_settings(run_specs(budget=7)["inferq"], compress=10, budget=7)
    config = sim_config(settings)
    assert config == SimConfig(
        budget=7,
        promotion_age_ms=180_000,
        early_drop_ms={H: 50, M: 280, L: 500},
        typical_ms={H: 50, M: 280, L: 500},
        learn_latency=True,
        readahead_per_tier=settings.readahead,
        housekeeping_interval_ms=250,
    )
    assert compressed_latency_s(10) == pytest.approx({H: 0.05, M: 0.28, L: 0.5})


def test_prediction_on_a_hand_checked_trace() -> None:
    # At peak LOW has one slot: 4 briefs of 0.5 s run one after another (waits 0, 0.5, 1, 1.5 s);
    # a chat at 0.1 s starts at once and takes 50 ms.
    trace = [*(arrival(i, 0, BRIEF, "dump") for i in range(4)), arrival(4, 100, CHAT)]
    predicted = predict(run_specs(budget=10)["inferq"], trace, compress=10, budget=10)
    low, high = predicted.tier(L), predicted.tier(H)
    assert low.wait_ms is not None and low.wait_ms.mean == 750.0 and low.by_status == {"OK": 4}
    assert high.wait_ms is not None and high.wait_ms.mean == 0.0
    assert high.end_to_end_ms is not None and high.end_to_end_ms.mean == 50.0
    assert predicted.low_makespan_s == 2.0
    assert predicted.tier(M).arrivals == 0 and predicted.tier(M).wait_ms is None
    # The lifted cap lets all four run at once.
    lifted = predict(run_specs(budget=10)["inferq-lifted"], trace, compress=10, budget=10)
    assert lifted.low_makespan_s == 0.5


# -- real against simulated ----------------------------------------------------------------------


def real_run(name: str, high_wait: int, medium_wait: int | None) -> RunSummary:
    def outcome(rid: str, tier: Tier, wait: int) -> MeasuredRequest:
        return MeasuredRequest(rid, tier, "OK", 0, wait, wait + 100)

    subs = [Submission(0, "h", "x", "poisson", H, 0, 0, 5, 202)]
    outcomes = {"h": outcome("h", H, high_wait)}
    if medium_wait is not None:
        subs.append(Submission(1, "m", "x", "poisson", M, 0, 0, 5, 202))
        outcomes["m"] = outcome("m", M, medium_wait)
    return RunSummary(
        run=name,
        policy="inferq",
        compress=10.0,
        budget=10,
        tiers=tier_rows(subs, outcomes),
        low_makespan_s=None,
        backend_max_in_flight=10,
        backend_by_status={},
        utilization=utilization([], [], lambda *_: 0, 10),
        min_effective_budget=10,
        submit_lag_ms=None,
        ingest_answer_ms=None,
        dump_accepted_s=None,
    )


def prediction(name: str, high_wait: float, medium_wait: float) -> Prediction:
    def row(tier: Tier, wait: float | None) -> TierPrediction:
        waits = [] if wait is None else [wait]
        by_status = {"OK": len(waits)} if waits else {}
        return TierPrediction(tier, len(waits), by_status, stats(waits), stats([w + 100 for w in waits]))

    return Prediction(
        run=name,
        policy="inferq",
        low_peak_ceiling=None,
        latency_s={},
        tiers=[row(H, high_wait), row(M, medium_wait), row(L, None)],
        low_makespan_s=None,
        max_in_flight=2,
        promoted=0,
    )


def test_targets_compare_high_and_medium_mean_waits_within_30_ms_either_way() -> None:
    runs = {
        "inferq": real_run("inferq", high_wait=25, medium_wait=40),  # +20, +30: both within
        "static": real_run("static", high_wait=10, medium_wait=200),  # MEDIUM +150: a miss
        "fifo": real_run("fifo", high_wait=0, medium_wait=5),  # HIGH -31: below the sim counts too
        "inferq-lifted": real_run("inferq-lifted", high_wait=5, medium_wait=None),  # no MEDIUM: n/a
    }
    predictions = {
        "inferq": prediction("inferq", 5.0, 10.0),
        "static": prediction("static", 0.0, 50.0),
        "fifo": prediction("fifo", 31.0, 5.0),
        "inferq-lifted": prediction("inferq-lifted", 0.0, 10.0),
    }
    targets = {t.run: t for t in prediction_targets(runs, predictions)}
    assert {run: t.verdict for run, t in targets.items()} == {
        "inferq": PASS,
        "static": MISS,
        "fifo": MISS,
        "inferq-lifted": NA,
    }
    assert targets["inferq"].measured == "HIGH +20.0 ms, MEDIUM +30.0 ms"
    assert prediction_targets({"static": runs["static"]}, {})[0].verdict == NA


def test_comparison_table_puts_real_beside_simulated() -> None:
    table = comparison_table(
        {"inferq": real_run("inferq", 25, 40)}, {"inferq": prediction("inferq", 5.0, 10.0)}
    )
    lines = table.splitlines()
    assert len(lines) == 2 + 3  # head, rule, one row per tier
    assert lines[2] == (
        "| inferq | HIGH | OK 1 | OK 1 | 25.0 | 5.0 | +20.0 | 25.0 | 5.0 | 125.0 | 105.0 | 125.0 | 105.0 |"
    )
    assert lines[4].startswith("| inferq | LOW | - | - | - | - | - |")


def test_sim_config_takes_the_dispatchers_tenant_headroom() -> None:
    settings, _ = run_settings(run_specs(budget=7)["inferq"], compress=10, budget=7)
    config = sim_config(
        settings.model_copy(update={"tenant_headroom_slots": 3, "tenant_active_window_s": 3.5})
    )
    assert (config.tenant_headroom_slots, config.tenant_active_window_ms) == (3, 3_500)
    assert sim_config(settings).tenant_headroom_slots == 2  # the dispatcher's default
    with pytest.raises(ValueError):
        SimConfig(tenant_headroom_slots=-1)


def test_tier_run_and_makespan_tables_name_each_column_and_fill_it_from_the_runs() -> None:
    lifted = real_run("inferq-lifted", 25, 40)
    s = stats([2.5, 1.25, 7.75])
    lifted = replace(lifted, low_makespan_s=12.34, submit_lag_ms=s, ingest_answer_ms=s, dump_accepted_s=1.5)
    runs = {"fifo": replace(real_run("fifo", 3, None), low_makespan_s=20.0), "inferq-lifted": lifted}
    tiers = tier_table(runs).splitlines()
    assert tiers[0].startswith("| run | tier | submitted | accepted | refused 429/503 | outcomes | missing ")
    assert tiers[0].endswith("| real-time eq. wait mean / p95 (s) | real-time eq. e2e mean / p95 (s) |")
    assert tiers[2] == (
        "| fifo | HIGH | 1 | 1 | 0 | OK 1 | 0 | 3.0 | 3.0 | 3.0 | 3.0 | 3.0 | 103.0 | 103.0 | 103.0 | 103.0 "
        "| 0.03 / 0.03 | 1.03 / 1.03 |"
    )
    assert tiers[3] == "| fifo | MEDIUM | 0 | 0 | 0 | - | 0 |" + " - |" * 11
    assert run_table(runs).splitlines()[2:] == [
        "| fifo | inferq | 20.0 (3.3) | 10 | 0 | - | - | - | 0.0 | 10 | none | - | - | - |",
        "| inferq-lifted | inferq | 12.3 (2.1) | 10 | 0 | - | - | - | 0.0 | 10 | none | 7.2 "
        "| 2.5 / 7.2 | 1.5 |",
    ]
    assert makespan_table(runs, {"fifo": prediction("fifo", 1.0, 2.0)}).splitlines() == [
        "| run | LOW makespan s real | sim | max in flight real (backend) | sim |",
        "|---|---|---|---|---|",
        "| fifo | 20.0 | - | 10 | 2 |",
    ]
