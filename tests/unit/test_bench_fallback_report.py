"""`inferq bench fallback`'s figures from outcomes and sampled answer counts
(services/tools/bench/fallback_report.py)."""

from __future__ import annotations

from inferq.messaging.records import InferenceResult, Status
from inferq.messaging.tiers import Tier
from inferq.tools.bench.fallback_report import Sample, figures, markdown

START_MS = 1_000_000


def result(
    i: int, status: Status, tier: Tier = Tier.HIGH, at_s: float = 0.0, e2e_ms: int = 100
) -> InferenceResult:
    enqueued = START_MS + int(at_s * 1000)
    return InferenceResult(
        request_id=f"r{i}",
        tier=tier,
        status=status,
        model="m",
        enqueued_at_ms=enqueued,
        completed_at_ms=enqueued + e2e_ms,
        attempts=1,
        dispatcher_id="d",
    )


SAMPLES = [
    Sample(0.0, 0, 0),
    Sample(5.0, 50, 0),
    Sample(10.0, 100, 0),  # outage begins at 10 s
    Sample(10.5, 100, 0),
    Sample(11.2, 100, 4),  # the spare's first answers
    Sample(20.0, 100, 90),  # outage ends at 20 s
    Sample(30.0, 100, 180),
    Sample(31.5, 101, 182),  # the probe answered
    Sample(32.0, 120, 183),  # the spare's last answer
    Sample(40.0, 200, 183),
]


def test_switch_times_from_the_sampled_answers():
    f = figures(
        sent=5,
        results=[result(1, Status.OK), result(2, Status.OK, at_s=12)],
        samples=SAMPLES,
        start_ms=START_MS,
        outage=(10.0, 20.0),
        end_s=40.0,
        primary_refused=7,
    )
    assert round(f.switch_s, 3) == 1.2
    assert round(f.first_back_s, 3) == 11.5
    assert round(f.all_back_s, 3) == 12.0


def test_failed_counts_every_non_ok_outcome_and_every_missing_one_but_not_the_expired():
    results = [
        result(1, Status.OK),
        result(2, Status.EXPIRED),
        result(3, Status.FAILED),
        result(4, Status.OK, Tier.LOW),
    ]
    f = figures(
        sent=6,
        results=results,
        samples=SAMPLES,
        start_ms=START_MS,
        outage=(10.0, 20.0),
        end_s=40,
        primary_refused=0,
    )
    assert (f.failed, f.expired, f.missing) == (3, 1, 2)
    assert "| requests failed, EXPIRED apart (goal 0) | 3 (MISS); EXPIRED 1 |" in markdown(f, "h", "b")


def test_no_switch_says_never_and_chat_latency_is_per_phase():
    flat = [Sample(t, 10 * t, 0) for t in range(0, 40, 5)]
    results = [result(i, Status.OK, at_s=15, e2e_ms=300 + i) for i in range(10)]
    results += [result(100 + i, Status.OK, at_s=2, e2e_ms=50) for i in range(10)]
    f = figures(
        sent=20,
        results=results,
        samples=flat,
        start_ms=START_MS,
        outage=(10.0, 20.0),
        end_s=40,
        primary_refused=0,
    )
    assert f.switch_s is None and f.all_back_s is None
    assert f.chat_e2e_ms["before"] == (50.0, 50.0)
    assert f.chat_e2e_ms["during"][0] == 304.5
    assert f.chat_e2e_ms["after"] is None
    text = markdown(f, "h", "b")
    assert "| time to switch (outage begins -> the spare's first answer) | never |" in text
    assert "| requests failed, EXPIRED apart (goal 0) | 0 (PASS)" in text
