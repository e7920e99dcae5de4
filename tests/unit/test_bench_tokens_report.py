"""`inferq bench tokens`'s report from hand-made results: the figures and verdicts a reader sees."""

from __future__ import annotations

from inferq.messaging.records import InferenceResult, Status, Usage
from inferq.messaging.tiers import Tier
from inferq.tools.bench.tokens_report import as_json, markdown, percentile, row, verdicts

T0 = 1_000_000


def result(
    tier: Tier, enqueued_s: float, dispatched_s: float, tokens: int, status: Status = Status.OK
) -> InferenceResult:
    return InferenceResult(
        request_id=f"{tier}-{enqueued_s}-{dispatched_s}",
        tier=tier,
        status=status,
        model="m",
        enqueued_at_ms=T0 + int(enqueued_s * 1000),
        completed_at_ms=T0 + int(dispatched_s * 1000) + 100,
        attempts=1,
        dispatcher_id="d",
        usage=Usage(tokens - 20, 20, tokens),
        dispatched_at_ms=T0 + int(dispatched_s * 1000),
    )


def test_tokens_per_minute_count_only_the_calls_dispatched_in_the_measured_minutes() -> None:
    results = [result(Tier.LOW, 0, s, 100) for s in range(0, 120, 2)]  # 60 calls over two minutes
    results.append(result(Tier.LOW, 0, 130, 5000))  # after the measured minutes: not counted
    r = row("inferq", 3000, 2.0, results, rate_limited=0)
    assert r.tokens_per_minute == 3000.0
    assert r.share_of_limit == 1.0
    assert r.answered_ok == 61


def test_waits_per_tier_and_the_verdicts() -> None:
    inferq = row(
        "inferq",
        1000,
        1.0,
        [result(Tier.HIGH, 0, 0.5, 480), result(Tier.LOW, 0, 30, 480)],
        rate_limited=0,
    )
    fifo = row(
        "fifo", 1000, 1.0, [result(Tier.LOW, 0, 0.1, 400), result(Tier.HIGH, 0, 20, 400)], rate_limited=2
    )
    assert (inferq.high_wait_p50_s, inferq.high_wait_p99_s, inferq.low_wait_p50_s) == (0.5, 0.5, 30.0)
    assert fifo.high_wait_p99_s == 20.0
    assert verdicts({"inferq": inferq, "fifo": fifo}) == {
        "tokens_per_minute_at_least_95_percent": True,  # 960 of 1000
        "no_429_from_over_dispatch": False,  # fifo's run had two
        "high_waits_no_longer_than_fifo": True,
    }
    text = markdown({"inferq": inferq, "fifo": fifo}, "header")
    assert "| inferq | 1000 | 960 | 96.0% | 0 | 2 | 0.50 / 0.50 | 30.00 |" in text
    assert "| no 429 from over dispatch | missed |" in text
    document = as_json({"inferq": inferq}, {"tpm": 1000})
    assert document["tpm"] == 1000
    assert document["verdicts"] == {
        "tokens_per_minute_at_least_95_percent": True,
        "no_429_from_over_dispatch": True,
        "high_waits_no_longer_than_fifo": None,
    }


def test_below_the_target_is_missed_and_empty_runs_say_nothing() -> None:
    low = row("inferq", 1000, 1.0, [result(Tier.LOW, 0, 1, 900)], rate_limited=0)
    assert verdicts({"inferq": low})["tokens_per_minute_at_least_95_percent"] is False
    empty = row("inferq", 1000, 1.0, [], rate_limited=0)
    assert (empty.tokens_per_minute, empty.high_wait_p99_s) == (0.0, None)
    assert percentile([], 99) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
