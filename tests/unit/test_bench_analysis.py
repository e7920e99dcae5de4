"""The benchmark's pure analysis, on inputs small enough to compute by hand."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from inferq.dispatcher.policies import build_scheduler
from inferq.dispatcher.settings import DispatcherSettings, build_schedule
from inferq.ingest.settings import IngestSettings
from inferq.messaging.tiers import Tier
from inferq.tools.bench.machine import MISS, NA, PASS
from inferq.tools.bench.scheduling_report import evaluate, preemption_table
from inferq.tools.bench.scheduling_run import compressed_env, preemption_figures, run_specs
from inferq.tools.bench.specs import SCHEDULING_RUNS
from inferq.tools.bench.summary import PreemptionFigures, RunSummary, Submission, low_makespan, tier_rows
from inferq.tools.measures import (
    AllowedFn,
    Interval,
    MeasuredRequest,
    allowed_by,
    busy_intervals,
    makespan_s,
    percentile,
    stats,
    utilization,
    waiting_intervals,
)
from inferq.tools.simbackend.hangup import OnHangup
from inferq.tools.simbackend.settings import SimBackendSettings

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW


# -- percentiles and makespan ------------------------------------------------------------------


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    # 101 values 0..100: the q-th percentile is q itself.
    values = [float(v) for v in range(100, -1, -1)]
    assert percentile(values, 95) == 95.0
    assert percentile(values, 99) == 99.0
    assert percentile([7.0], 99) == 7.0


def test_percentile_refuses_nothing_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q must be"):
        percentile([1.0], 101)


def test_stats_mean_and_percentiles() -> None:
    s = stats([10.0, 20.0, 30.0, 40.0])
    assert s is not None
    assert (s.count, s.mean, s.p50) == (4, 25.0, 25.0)
    assert s.p95 == pytest.approx(38.5)  # rank 2.85: 30 + 0.85 x 10
    assert stats([]) is None


def test_makespan_from_first_enqueue_to_last_completion() -> None:
    assert makespan_s(1_000, [3_000, 5_500, 2_000]) == 4.5
    assert makespan_s(None, [3_000]) is None
    assert makespan_s(1_000, []) is None


# -- intervals -----------------------------------------------------------------------------------


def outcome(
    rid: str, tier: Tier, enq: int, disp: int | None, done: int, status: str = "OK"
) -> MeasuredRequest:
    return MeasuredRequest(rid, tier, status, enq, disp, done)


def test_waiting_ends_at_dispatch_or_at_the_outcome_of_a_request_never_dispatched() -> None:
    waits = waiting_intervals(
        [outcome("a", H, 0, 100, 150), outcome("b", H, 50, None, 600, "EXPIRED")], promotion_age_ms=10_000
    )
    assert waits == [Interval(0, 100, H, 0), Interval(50, 600, H, 50)]


def test_a_promoted_low_request_waits_as_low_then_as_medium_and_takes_a_medium_token() -> None:
    o = outcome("a", L, 0, 5_000, 5_500)
    assert waiting_intervals([o], promotion_age_ms=2_000) == [
        Interval(0, 2_000, L, 0),
        Interval(2_000, 5_000, M, 0),
    ]
    assert busy_intervals([o], promotion_age_ms=2_000) == [Interval(5_000, 5_500, M)]
    assert busy_intervals([o], promotion_age_ms=60_000) == [Interval(5_000, 5_500, L)]


def test_only_requests_that_took_a_token_are_busy() -> None:
    busy = busy_intervals(
        [outcome("a", H, 0, 100, 300), outcome("b", H, 0, None, 400, "EXPIRED")], promotion_age_ms=1_000
    )
    assert busy == [Interval(100, 300, H)]


# -- time-weighted utilization -------------------------------------------------------------------


def everything_waiting(
    in_use: Mapping[Tier, int], waiting: Mapping[Tier, int], _oldest: Mapping[Tier, int | None], budget: int
) -> int:
    """A toy policy: every waiting request may start, up to the budget."""
    return min(budget, sum(in_use.values()) + sum(waiting.values()))


def test_utilization_counts_only_the_time_when_work_waits() -> None:
    # 0-1 s: one HIGH waits, one LOW runs: used 1, allowed 2. 1-2 s: the LOW runs, nothing waits.
    u = utilization([Interval(0, 1_000, H)], [Interval(0, 2_000, L)], everything_waiting, budget=10)
    assert u.waiting_s == 1.0
    assert u.used_token_s_waiting == 1.0
    assert u.allowed_token_s_waiting == 2.0
    assert u.vs_allowed_waiting == 0.5
    assert u.vs_budget_waiting == 0.1  # 1 token-s of 10 x 1 s
    assert u.span_s == 2.0
    assert u.vs_budget_span == 0.1  # 2 token-s of 10 x 2 s


def test_utilization_is_weighted_by_time() -> None:
    # Work waits 0-4 s. Two tokens in use 0-1 s, none 1-4 s; the toy policy allows 4 then 2.
    waits = [Interval(0, 4_000, M), Interval(0, 4_000, M)]
    busy = [Interval(0, 1_000, M), Interval(0, 1_000, M)]
    u = utilization(waits, busy, everything_waiting, budget=10)
    assert u.used_token_s_waiting == 2.0
    assert u.allowed_token_s_waiting == 4.0 * 1 + 2.0 * 3
    assert u.vs_allowed_waiting == pytest.approx(0.2)


def test_utilization_follows_budget_changes() -> None:
    def the_budget(
        _u: Mapping[Tier, int], _w: Mapping[Tier, int], _o: Mapping[Tier, int | None], b: int
    ) -> int:
        return b

    u = utilization([Interval(0, 1_000, H)], [], the_budget, budget=10, budget_changes=[(500, 4)])
    assert u.allowed_token_s_waiting == 10 * 0.5 + 4 * 0.5
    assert u.vs_allowed_waiting == 0.0


def test_utilization_hands_the_oldest_waiting_enqueue_time_per_tier_to_the_policy() -> None:
    seen: list[dict[Tier, int | None]] = []

    def record(
        _u: Mapping[Tier, int], _w: Mapping[Tier, int], oldest: Mapping[Tier, int | None], _b: int
    ) -> int:
        seen.append(dict(oldest))
        return 1

    utilization(
        [Interval(0, 300, H, 0), Interval(100, 200, H, 100), Interval(100, 400, L, 100)], [], record, 10
    )
    assert seen == [
        {H: 0, M: None, L: None},  # 0-100
        {H: 0, M: None, L: 100},  # 100-200
        {H: 0, M: None, L: 100},  # 200-300
        {H: None, M: None, L: 100},  # 300-400
    ]


def test_no_waiting_means_no_utilization_figure() -> None:
    u = utilization([], [Interval(0, 1_000, H)], everything_waiting, budget=10)
    assert u.vs_allowed_waiting is None and u.vs_budget_waiting is None
    assert u.vs_budget_span == 0.1


# -- what the real policies allow (replayed through the dispatcher's scheduler) ------------------


def peak(policy: str, low_ceiling: int | None = None) -> AllowedFn:
    """What the dispatcher itself builds for a run pinned to peak (the bench's replay does the same)."""
    settings = DispatcherSettings(budget=10, schedule_pin="peak", low_peak_ceiling=low_ceiling)
    return allowed_by(build_scheduler(policy, build_schedule(settings)))


NONE_IN_USE = dict.fromkeys(Tier, 0)
NO_OLDEST: dict[Tier, int | None] = {H: 0, M: 0, L: 0}


@pytest.mark.parametrize(
    ("policy", "low_ceiling", "waiting", "allowed"),
    [
        ("inferq", None, {H: 0, M: 0, L: 50}, 1),  # LOW capped at one slot at peak
        ("inferq", 8, {H: 0, M: 0, L: 50}, 8),  # lifted: all but the HIGH headroom
        ("inferq", None, {H: 50, M: 50, L: 50}, 10),  # 6 / 3 / 1
        ("inferq", None, {H: 0, M: 50, L: 0}, 8),  # MEDIUM borrows up to B - headroom
        ("static", None, {H: 50, M: 0, L: 0}, 6),  # hard slots: nothing lent
        ("fifo", None, {H: 0, M: 0, L: 50}, 10),
        ("fifo", None, {H: 3, M: 0, L: 0}, 3),
    ],
)
def test_allowed_replays_the_dispatchers_own_scheduler(
    policy: str, low_ceiling: int | None, waiting: dict[Tier, int], allowed: int
) -> None:
    assert peak(policy, low_ceiling)(NONE_IN_USE, waiting, NO_OLDEST, 10) == allowed


def test_allowed_counts_tokens_already_in_use_and_the_effective_budget() -> None:
    fn = peak("inferq")
    # One LOW already running at peak: nothing more for LOW, and the one running counts.
    assert fn({H: 0, M: 0, L: 1}, {H: 0, M: 0, L: 9}, NO_OLDEST, 10) == 1
    assert fn(NONE_IN_USE, {H: 50, M: 0, L: 0}, NO_OLDEST, 4) == 4


def test_a_low_request_running_alone_at_peak_uses_all_that_is_allowed() -> None:
    fn = peak("inferq")
    u = utilization([Interval(0, 1_000, L)], [Interval(0, 1_000, L)], fn, budget=10)
    assert u.vs_allowed_waiting == 1.0
    assert u.vs_budget_waiting == 0.1


# -- per-run summary and targets -----------------------------------------------------------------


def submission(rid: str, tier: Tier, status: int | None = 202, kind: str = "poisson") -> Submission:
    return Submission(0, rid, "x", kind, tier, 0, 0, 5, status)


def test_tier_rows_count_refusals_outcomes_and_missing() -> None:
    subs = [
        submission("h1", H),
        submission("h2", H),
        submission("h3", H, 429),
        submission("h4", H, None),
        submission("m1", M),
    ]
    outcomes = {
        "h1": outcome("h1", H, 0, 10, 60),
        "h2": outcome("h2", H, 0, None, 500, "EXPIRED"),
    }
    high, medium, low = tier_rows(subs, outcomes)
    assert (high.submitted, high.accepted, high.refused, high.errors, high.missing) == (4, 2, 1, 1, 0)
    assert high.by_status == {"EXPIRED": 1, "OK": 1}
    assert high.wait_ms is not None and high.wait_ms.mean == 10.0  # only the dispatched one
    # The expired one counted with its 500 ms in queue until it was dropped.
    assert high.wait_incl_dropped_ms is not None and high.wait_incl_dropped_ms.mean == 255.0
    assert high.end_to_end_ms is not None and high.end_to_end_ms.mean == 60.0
    assert medium.missing == 1 and medium.wait_ms is None
    assert low.submitted == 0


def test_low_makespan_runs_from_the_dumps_first_enqueue_and_needs_every_low_outcome() -> None:
    subs = [submission("b1", L, kind="dump"), submission("b2", L, kind="dump")]
    outcomes = {"b1": outcome("b1", L, 1_000, 1_000, 2_000), "b2": outcome("b2", L, 1_200, 2_000, 9_000)}
    assert low_makespan(subs, outcomes) == 8.0
    assert low_makespan(subs, {"b1": outcomes["b1"]}) is None


def run_summary(name: str, policy: str, high_wait: float, medium_wait: float, makespan: float) -> RunSummary:
    subs = [submission(f"{name}-h", H), submission(f"{name}-m", M), submission(f"{name}-l", L, kind="dump")]
    outcomes = {
        f"{name}-h": outcome(f"{name}-h", H, 0, int(high_wait), 1_000),
        f"{name}-m": outcome(f"{name}-m", M, 0, int(medium_wait), 2_000),
        f"{name}-l": outcome(f"{name}-l", L, 0, 0, int(makespan * 1000)),
    }
    u = utilization([], [], everything_waiting, 10)
    return RunSummary(
        run=name,
        policy=policy,
        compress=10.0,
        budget=10,
        tiers=tier_rows(subs, outcomes),
        low_makespan_s=makespan,
        backend_max_in_flight=10,
        backend_by_status={"200": 3},
        utilization=u,
        min_effective_budget=10,
        submit_lag_ms=None,
        ingest_answer_ms=None,
        dump_accepted_s=None,
    )


def test_targets_say_pass_miss_or_not_run() -> None:
    runs = {
        "inferq": run_summary("inferq", "inferq", high_wait=20, medium_wait=100, makespan=150),
        "fifo": run_summary("fifo", "fifo", high_wait=900, medium_wait=1_000, makespan=40),
    }
    verdicts = {(t.name, t.run): t.verdict for t in evaluate(runs)}
    assert verdicts[("HIGH mean queue wait (wall clock, compressed run)", "inferq")] == PASS
    assert verdicts[("MEDIUM mean queue wait vs FIFO (dispatched only)", "inferq")] == PASS  # 100 <= 1000 / 4
    assert verdicts[("LOW makespan, LOW's peak cap lifted, vs FIFO", "inferq-lifted")] == NA
    # No work ever waited in this toy run: no utilization figure is a miss, not a pass.
    assert verdicts[("utilization while work waits, of what the ceilings allow", "inferq")] == MISS
    assert verdicts[("LOW makespan, forecast lending, vs FIFO", "forecast")] == NA


def test_forecast_targets_hold_it_to_fifo_and_the_capped_run() -> None:
    runs = {
        "inferq": run_summary("inferq", "inferq", high_wait=20, medium_wait=100, makespan=150),
        "forecast": run_summary("forecast", "inferq", high_wait=45, medium_wait=100, makespan=59),
        "fifo": run_summary("fifo", "fifo", high_wait=900, medium_wait=1_000, makespan=40),
    }
    verdicts = {(t.name, t.run): t.verdict for t in evaluate(runs)}
    assert verdicts[("LOW makespan, forecast lending, vs FIFO", "forecast")] == PASS  # 59 <= 60
    assert verdicts[("HIGH p99 queue wait vs the capped run's", "forecast")] == MISS  # 45 > 2 x 20
    assert verdicts[("no HIGH expired, forecast lending", "forecast")] == PASS
    assert verdicts[("budget used while work waits, forecast lending", "forecast")] == MISS  # nothing waited


def test_preemption_targets_hold_it_to_the_capped_run_fifo_and_the_tokens_served() -> None:
    capped = replace(
        run_summary("inferq", "inferq", high_wait=20, medium_wait=100, makespan=150), ok_indexes=[0, 1, 2]
    )
    fifo = run_summary("fifo", "fifo", high_wait=900, medium_wait=1_000, makespan=40)
    cost = PreemptionFigures(
        by_tier={"LOW": 4}, abandoned_calls=4, abandoned_tokens=40, completed_tokens=1_000
    )
    preempt = replace(
        run_summary("preempt", "inferq", high_wait=24, medium_wait=90, makespan=52),
        preemption=cost,
        ok_indexes=[0, 1, 2],
    )
    verdicts = {
        (t.name, t.run): t.verdict for t in evaluate({"inferq": capped, "fifo": fifo, "preempt": preempt})
    }
    assert verdicts[("HIGH p99 queue wait vs the capped run's", "preempt")] == PASS  # 24 <= 1.2 x 20
    assert verdicts[("MEDIUM answered OK (within deadline) vs the capped run's", "preempt")] == PASS
    assert verdicts[("LOW makespan, preemption, vs FIFO", "preempt")] == PASS  # 52 <= 1.3 x 40
    assert verdicts[("tokens discarded by preemption vs tokens served", "preempt")] == PASS  # 4%
    assert verdicts[("nothing lost, nothing unserved that the capped run served", "preempt")] == PASS
    cut = "backend max concurrency <= B, the budget never cut (429s while a slot is freed)"
    assert verdicts[(cut, "preempt")] == PASS
    assert ("backend max concurrency <= B, zero 429s", "preempt") not in verdicts

    # A little slower chat, more discarded, one request the capped run served and this one did not.
    worse = replace(
        run_summary("preempt", "inferq", high_wait=25, medium_wait=90, makespan=53),
        preemption=replace(cost, abandoned_tokens=51),
        ok_indexes=[0, 2],
    )
    verdicts = {
        (t.name, t.run): t.verdict for t in evaluate({"inferq": capped, "fifo": fifo, "preempt": worse})
    }
    assert verdicts[("HIGH p99 queue wait vs the capped run's", "preempt")] == MISS
    assert verdicts[("LOW makespan, preemption, vs FIFO", "preempt")] == MISS
    assert verdicts[("tokens discarded by preemption vs tokens served", "preempt")] == MISS
    assert verdicts[("nothing lost, nothing unserved that the capped run served", "preempt")] == MISS
    cut_run = replace(worse, min_effective_budget=7)
    verdicts = {(t.name, t.run): t.verdict for t in evaluate({"preempt": cut_run})}
    assert verdicts[(cut, "preempt")] == MISS
    # Not run: not applicable, never a pass.
    alone = {(t.name, t.run): t.verdict for t in evaluate({"preempt": preempt})}
    assert alone[("HIGH p99 queue wait vs the capped run's", "preempt")] == NA


def test_preemption_figures_read_the_dispatchers_counters_and_the_backends_hang_ups() -> None:
    samples = [
        {"name": "inferq_preemptions_total", "labels": {"tier": "LOW"}, "value": 5.0},
        {"name": "inferq_preemptions_total", "labels": {"tier": "MEDIUM"}, "value": 1.0},
        {"name": "inferq_preemptions_total", "labels": {"tier": "LOW"}, "value": 2.0},  # a second dispatcher
        {"name": "inferq_preemptions_created", "labels": {"tier": "LOW"}, "value": 1.7e9},
        {
            "name": "inferq_preempted_tokens_total",
            "labels": {"tier": "LOW", "source": "estimated"},
            "value": 70.0,
        },
        {"name": "inferq_preemption_limit_reached_total", "labels": {"tier": "LOW"}, "value": 1.0},
    ]
    backend = {"abandoned": 8, "abandoned_tokens": 64, "completed_tokens": 3_200}
    figures = preemption_figures(backend, samples)
    assert figures == PreemptionFigures({"LOW": 7, "MEDIUM": 1}, 1, 70, 8, 64, 3_200)
    assert (figures.total, figures.discarded_share) == (8, 0.02)
    assert PreemptionFigures().discarded_share is None  # nothing served: no share, not 0%
    run = replace(run_summary("preempt", "inferq", 1, 1, 1), preemption=figures)
    assert "| preempt | 1 | 7 | 1 | 8 | 64 / 3200 (2.0%) | 70 | 10 / 0 |" in preemption_table(
        {"preempt": run}
    )
    quiet = run_summary("inferq", "inferq", 1, 1, 1)
    assert preemption_table({"inferq": quiet}) == "No call was preempted or abandoned."


def test_the_preempt_runs_declare_the_backend_preemptible_behind_a_backend_that_frees_or_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    specs = run_specs(budget=10)
    assert set(specs) == set(SCHEDULING_RUNS)
    for run, on_hangup in (("preempt", OnHangup.FREE), ("preempt-hosted", OnHangup.KEEP)):
        for name, value in compressed_env(specs[run], compress=10, prefix="bench.x").items():
            monkeypatch.setenv(name, value)
        settings = DispatcherSettings()
        assert (settings.backend_preemptible, settings.forecast_lending, settings.policy) == (
            True,
            False,
            "inferq",
        )
        assert SimBackendSettings().on_hangup is on_hangup
    for name, value in compressed_env(specs["inferq"], compress=10, prefix="bench.x").items():
        monkeypatch.setenv(name, value)
    assert not DispatcherSettings().backend_preemptible


# -- the compressed settings reach the services under the names their settings classes read ------


def test_the_forecast_run_turns_forecast_lending_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in compressed_env(run_specs(budget=10)["forecast"], compress=10, prefix="x").items():
        monkeypatch.setenv(name, value)
    settings = DispatcherSettings()
    assert settings.forecast_lending
    assert (settings.policy, settings.low_peak_ceiling) == ("inferq", None)


def test_compressed_env_names_are_the_ones_the_settings_classes_read(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = run_specs(budget=10)["inferq-lifted"]
    for name, value in compressed_env(spec, compress=10, prefix="bench.x").items():
        monkeypatch.setenv(name, value)
    dispatcher = DispatcherSettings()
    assert dispatcher.schedule_pin == "peak"
    assert dispatcher.low_peak_ceiling == 8
    assert dispatcher.promotion_age_s == 180.0
    assert dispatcher.typical_latency_s == {H: 0.05, M: 0.28, L: 0.5}
    assert (dispatcher.retry_base_backoff_s, dispatcher.retry_max_backoff_s) == (0.05, 3.0)
    ingest = IngestSettings()
    assert ingest.deadlines_ms == {H: 500, M: 3_000, L: 4_320_000}
    assert ingest.typical_latency_s == {H: 0.05, M: 0.28, L: 0.5}
    assert ingest.dispatcher_group == "bench.x-dispatcher"
    assert SimBackendSettings().on_hangup is OnHangup.KEEP


def test_a_run_can_have_the_backend_free_a_hung_up_call(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = replace(run_specs(budget=10)["inferq"], backend_on_hangup="free")
    for name, value in compressed_env(spec, compress=10, prefix="bench.x").items():
        monkeypatch.setenv(name, value)
    assert SimBackendSettings().on_hangup is OnHangup.FREE
