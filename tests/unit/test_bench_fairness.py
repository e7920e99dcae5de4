"""The fairness bench's trace and figures, on inputs small enough to check by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferq.messaging.records import InferenceResult, Status
from inferq.messaging.tiers import Tier
from inferq.tenancy.loading import load_tenants
from inferq.tools.bench.fairness import ALONE, WITH_A, report, tenant_specs
from inferq.tools.bench.fairness_report import (
    LowSplit,
    arrivals_at_full_backend,
    backend_target,
    full_backend_table,
    high_p95_target,
    lost_target,
    low_completions_over_time,
    low_split_while_both_wait,
    refusals,
    series_table,
    share_target,
    tenant_rows,
)
from inferq.tools.bench.machine import MISS, PASS
from inferq.tools.bench.pipeline_run import PipelineRun
from inferq.tools.bench.scenarios import TENANT_A, TENANT_B, FairnessSpec
from inferq.tools.bench.summary import Submission
from inferq.tools.measures import MeasuredRequest
from inferq.tools.stack.tenants import write_tenants
from inferq.tools.traces.generator import generate

H, L = Tier.HIGH, Tier.LOW


def sub(rid: str, tenant: str, tier: Tier, status: int = 202, due: int = 0) -> Submission:
    return Submission(0, rid, "s", "poisson", tier, due, due, due, status, tenant=tenant)


def out(
    rid: str, tenant: str, tier: Tier, enq: int, disp: int | None, done: int, status: str = "OK"
) -> MeasuredRequest:
    return MeasuredRequest(rid, tier, status, enq, disp, done, tenant)


# -- the trace ------------------------------------------------------------------------------------


def test_a_floods_ten_times_its_weighted_share_of_each_tiers_peak_floor() -> None:
    spec = FairnessSpec(compress=5, weight_a=1, weight_b=3, flood=10)
    assert spec.weight_share(TENANT_A) == 0.25 and spec.weight_share(TENANT_B) == 0.75
    # HIGH's peak floor is 6 slots of 0.5 s / 5 calls: 60 calls/s, A's share 15/s, flooded x10.
    assert spec.tier_rate_per_s(H) == pytest.approx(60)
    assert spec.a_rate_per_s(H) == pytest.approx(150)
    # LOW: one slot of 5 s / 5: 1 call/s; A 2.5/s; B's briefs at 1.2 x its 0.75/s, so they queue.
    assert spec.a_rate_per_s(L) == pytest.approx(2.5)
    assert spec.b_low_rate_per_s() == pytest.approx(0.9)


def test_b_alone_is_exactly_bs_part_of_the_trace_with_a() -> None:
    spec = FairnessSpec(duration_s=10)
    both = generate(spec.scenario())
    without_a = generate(FairnessSpec(duration_s=10, flood=1e-9).scenario())  # A's rate about 0
    b_of_both = [(a.offset_ms, a.scenario, a.session_id) for a in both if a.tenant == TENANT_B]
    b_alone = [(a.offset_ms, a.scenario, a.session_id) for a in without_a if a.tenant == TENANT_B]
    assert b_of_both == b_alone and b_of_both
    counts = {(a.tenant, a.tier) for a in both}
    assert counts == {(TENANT_A, H), (TENANT_A, L), (TENANT_B, H), (TENANT_B, Tier.MEDIUM), (TENANT_B, L)}
    a_chats = sum(1 for a in both if a.tenant == TENANT_A and a.tier is H)
    assert 1_300 < a_chats < 1_700  # 150/s over 10 s


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duration_s": 0},
        {"compress": -1},
        {"weight_a": 0},
        {"flood": 0},
        {"budget": 0},
        {"a_max_concurrency": 0},
        {"a_max_concurrency": 11},
    ],
)
def test_a_spec_that_cannot_run_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        FairnessSpec(**kwargs)  # type: ignore[arg-type]


def test_the_tenants_file_the_bench_writes_is_one_the_services_accept(tmp_path: Path) -> None:
    spec = FairnessSpec(weight_a=1, weight_b=3)
    tenants = tenant_specs(spec)
    path = write_tenants(tmp_path / "tenants.toml", *tenants)
    directory = load_tenants(path)
    assert {t.name: t.weight for t in directory} == {TENANT_A: 1, TENANT_B: 3}
    text = path.read_text()
    assert all(t.key not in text for t in tenants)  # hashes only
    assert {directory.tenant_for_key(t.key).name for t in tenants} == {TENANT_A, TENANT_B}  # type: ignore[union-attr]
    assert {t.name: t.max_concurrency for t in directory} == {TENANT_A: None, TENANT_B: None}
    capped = load_tenants(
        write_tenants(tmp_path / "capped.toml", *tenant_specs(FairnessSpec(a_max_concurrency=8)))
    )
    assert {t.name: t.max_concurrency for t in capped} == {TENANT_A: 8, TENANT_B: None}


# -- the figures ----------------------------------------------------------------------------------

# One LOW slot. A's two briefs wait from 0; B's first arrives at 500, its second at 5_000. Starts: a1
# at 0 (B had nothing waiting), b1 at 1_000 (a2 waiting: counted), a2 at 2_000 (B had nothing
# waiting), b2 at 5_000 (A had nothing left). A chat of A refused by ingest, one of B served.
SUBS = [
    sub("a1", TENANT_A, L),
    sub("a2", TENANT_A, L),
    sub("b1", TENANT_B, L),
    sub("b2", TENANT_B, L),
    sub("a3", TENANT_A, H, status=429),
    sub("b3", TENANT_B, H),
]
OUT = {
    "a1": out("a1", TENANT_A, L, 0, 0, 1_000),
    "a2": out("a2", TENANT_A, L, 0, 2_000, 3_000),
    "b1": out("b1", TENANT_B, L, 500, 1_000, 2_000),
    "b2": out("b2", TENANT_B, L, 5_000, 5_000, 6_000),
    "b3": out("b3", TENANT_B, H, 100, 120, 200),
}


def test_the_split_counts_only_starts_made_while_both_had_briefs_waiting() -> None:
    split = low_split_while_both_wait(SUBS, OUT, TENANT_B, TENANT_A)
    assert split.counted == {TENANT_B: 1, TENANT_A: 0}
    assert split.share == 1.0
    # a2 waits 0-2000 and b1 500-1000: at 1000 both wait. At 2000 b1 has gone and b2 not come.
    with_b_waiting = {**OUT, "b2": out("b2", TENANT_B, L, 1_500, 3_000, 4_000)}
    split = low_split_while_both_wait(SUBS, with_b_waiting, TENANT_B, TENANT_A)
    assert split.counted == {TENANT_B: 1, TENANT_A: 1} and split.share == 0.5


def test_expired_briefs_are_not_completions() -> None:
    expired = {**OUT, "a2": out("a2", TENANT_A, L, 0, None, 4_000, "EXPIRED")}
    split = low_split_while_both_wait(SUBS, expired, TENANT_B, TENANT_A)
    assert split.counted == {TENANT_B: 1, TENANT_A: 0}
    assert low_completions_over_time(SUBS, expired, TENANT_A, start_ms=0, bin_s=1, bins=3) == [0, 1, 0]


def test_low_completions_per_bin_and_the_last_bin_takes_the_rest() -> None:
    assert low_completions_over_time(SUBS, OUT, TENANT_B, start_ms=0, bin_s=1, bins=3) == [0, 0, 2]
    assert low_completions_over_time(SUBS, OUT, TENANT_B, start_ms=0, bin_s=5, bins=4) == [1, 1, 0, 0]
    table = series_table({"B": [1, 2], "A": [0, 3]}, 5)
    assert "| 0-5 | 1 | 0 |" in table and "| 5-end | 2 | 3 |" in table


def test_per_tenant_rows_hold_only_that_tenants_requests_and_refusals() -> None:
    a_high = next(r for r in tenant_rows(SUBS, OUT, TENANT_A) if r.tier is H)
    b_high = next(r for r in tenant_rows(SUBS, OUT, TENANT_B) if r.tier is H)
    assert (a_high.submitted, a_high.accepted, a_high.refused) == (1, 0, 1)
    assert (b_high.submitted, b_high.accepted, b_high.refused, b_high.missing) == (1, 1, 0, 0)
    assert b_high.wait_ms is not None and b_high.wait_ms.mean == 20.0


def test_targets_pass_and_miss_at_their_thresholds() -> None:
    rows = tenant_rows(SUBS, OUT, TENANT_B)
    high = next(r for r in rows if r.tier is H)
    assert high_p95_target(high, high).verdict == PASS
    slower = {**OUT, "b3": out("b3", TENANT_B, H, 100, 131, 200)}  # 31 ms against 20: +11
    worse = next(r for r in tenant_rows(SUBS, slower, TENANT_B) if r.tier is H)
    assert high_p95_target(high, worse).verdict == MISS
    assert share_target(LowSplit(TENANT_B, {TENANT_B: 7, TENANT_A: 3}, 0.7), 0.75).verdict == PASS
    assert share_target(LowSplit(TENANT_B, {TENANT_B: 6, TENANT_A: 4}, 0.6), 0.75).verdict == MISS
    assert share_target(LowSplit(TENANT_B, {TENANT_B: 0, TENANT_A: 0}, None), 0.75).verdict == MISS
    assert lost_target({"x": 0, "y": 0}).verdict == PASS and lost_target({"x": 1}).verdict == MISS
    assert backend_target({"x": 10}, {"x": 0}, 10).verdict == PASS
    assert backend_target({"x": 11}, {"x": 0}, 10).verdict == MISS
    assert backend_target({"x": 10}, {"x": 1}, 10).verdict == MISS  # it refused an 11th call


def test_refusals_are_told_apart_by_the_quota_ingest_names() -> None:
    share = "{\"error\":\"tenant 'a' is over its share of tier HIGH's backlog (about 20 of its 15, ..."
    full = '{"error":"tier HIGH is over capacity (backlog 61, capacity 60)","retry_after_s":1}'
    rate = '{"error":"tenant \'a\' is over its quota of 60 requests per minute (burst 60); retry later"}'
    subs = [
        Submission(0, "1", "s", "poisson", H, 0, 0, 0, 429, share, TENANT_A),
        Submission(1, "2", "s", "poisson", H, 0, 0, 0, 429, share, TENANT_A),
        Submission(2, "3", "s", "poisson", H, 0, 0, 0, 429, full, TENANT_A),
        Submission(3, "4", "s", "poisson", L, 0, 0, 0, 429, rate, TENANT_A),
        Submission(4, "5", "s", "poisson", L, 0, 0, 0, 503, "kafka did not answer", TENANT_A),
        Submission(5, "6", "s", "poisson", H, 0, 0, 0, 429, full, TENANT_B),
        Submission(6, "7", "s", "poisson", H, 0, 0, 0, 202, None, TENANT_A),
    ]
    assert refusals(subs, TENANT_A) == {H: {"share": 2, "tier full": 1}, L: {"kafka": 1, "rate": 1}}
    assert refusals(subs, TENANT_B) == {H: {"tier full": 1}}


def result(o: MeasuredRequest) -> InferenceResult:
    return InferenceResult(
        request_id=o.request_id,
        tier=o.tier,
        status=Status(o.status),
        model="m",
        enqueued_at_ms=o.enqueued_ms,
        completed_at_ms=o.completed_ms,
        attempts=1,
        dispatcher_id="d",
        dispatched_at_ms=o.dispatched_ms,
        tenant=o.tenant,
    )


def pipeline_run(
    name: str, subs: list[Submission], outcomes: dict[str, MeasuredRequest], max_in_flight: int
) -> PipelineRun:
    ok = sum(1 for o in outcomes.values() if o.status == "OK")
    return PipelineRun(
        name=name,
        topic_prefix=f"bench.{name}",
        env={},
        seconds=1.0,
        submissions=subs,
        results={rid: result(o) for rid, o in outcomes.items()},
        backend_stats={
            "max_in_flight": max_in_flight,
            # With A, one call more answered 200 than ended OK: the dispatcher gave it up.
            "by_status": {"200": ok + int(name == WITH_A), "429": int(name == ALONE)},
        },
        effective_budget_samples=[(0, 10)],
        duplicates_on_reply_topic=0,
        missing_ids=["b9"] if name == WITH_A else [],
    )


def test_the_report_puts_both_runs_and_every_target_in_its_tables() -> None:
    b_subs = [s for s in SUBS if s.tenant == TENANT_B]
    b_out = {rid: o for rid, o in OUT.items() if o.tenant == TENANT_B}
    runs = {ALONE: pipeline_run(ALONE, b_subs, b_out, 2), WITH_A: pipeline_run(WITH_A, SUBS, OUT, 11)}
    document, markdown = report(FairnessSpec(duration_s=10), [], runs, seconds=3.0)
    # B 1 of 1 start while both waited: 100%, not 75% +- 10%; one lost; 11 in flight over 10.
    assert [t["verdict"] for t in document["targets"]] == [PASS, MISS, MISS, MISS]
    assert "| b-with-a | HIGH | 1 | 1 | 0 | OK 1 | 0 | 20.0 | 20.0 | 1 |" in markdown
    assert "| b-with-a | HIGH | 1 | 0 | 1 (other 1) | - | 0 | - | - | - |" in markdown  # A's 429
    assert "| b-with-a | 1 | 11 | 0 | 10 | 1 | 0 | 1 / 0 | 0.0 / 0.0 |" in markdown
    assert "| b-alone | 1 | 2 | 1 | 10 | 0 | 0 | - |" in markdown
    assert "b-alone max 2, 429s 1, b-with-a max 11, 429s 0" in markdown
    assert "b-alone 0, b-with-a 1" in markdown  # the lost request is named per run
    assert document["low_split_while_both_wait"]["counted"] == {TENANT_B: 1, TENANT_A: 0}


def test_chats_arriving_with_every_slot_busy_wait_for_the_first_call_to_end() -> None:
    # Budget 2: A's two calls hold both slots 0-100 and 0-150. B's first chat arrives at 50 and
    # starts at 100, when the first ends; its second arrives at 200 to a free backend.
    subs = [sub("a1", TENANT_A, H), sub("a2", TENANT_A, H), sub("b1", TENANT_B, H), sub("b2", TENANT_B, H)]
    outcomes = {
        "a1": out("a1", TENANT_A, H, 0, 0, 100),
        "a2": out("a2", TENANT_A, H, 0, 0, 150),
        "b1": out("b1", TENANT_B, H, 50, 100, 200),
        "b2": out("b2", TENANT_B, H, 200, 205, 300),
    }
    r = arrivals_at_full_backend(subs, outcomes, TENANT_B, H, budget=2)
    assert (r.dispatched, r.at_full) == (2, 1)
    assert r.wait_ms is not None and r.wait_ms.mean == 50.0
    assert r.to_first_end_ms is not None and r.to_first_end_ms.mean == 50.0
    assert arrivals_at_full_backend(subs, outcomes, TENANT_B, H, budget=3).at_full == 0
    assert "| x | 2 | 1 | 50.0 / 50.0 | 50.0 / 50.0 |" in full_backend_table({"x": r}, 2)
