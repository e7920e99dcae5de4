"""The cluster chaos figures: refusals and their longest run, throughput's recovery."""

from __future__ import annotations

from inferq.tools.chaos.figures import recovery, refusals
from inferq.tools.chaos.traffic import Submitted


def answer(i: int, status: int | None, took: float = 0.1) -> Submitted:
    return Submitted(f"r{i}", status, sent_at=float(i), answered_at=float(i) + took)


def test_the_longest_run_of_refusals_is_counted_in_sending_order() -> None:
    statuses = [202, 503, 503, 202, 503, None, 503, 503, 202, 503]
    answers = [answer(i, s) for i, s in enumerate(statuses)]
    found = refusals(list(reversed(answers)))  # the order kept is the sending order
    assert found.by_status == {"503": 6, "none": 1}
    assert found.total == 7
    assert found.longest_run == 4
    assert found.longest_run_s == 7.1 - 4.0


def test_no_refusal_is_no_run() -> None:
    found = refusals([answer(i, 202) for i in range(5)])
    assert (found.total, found.longest_run, found.longest_run_s) == (0, 0, 0.0)
    assert refusals([]).longest_run == 0


def steady(start_ms: int, end_ms: int, per_s: int) -> list[int]:
    step = 1000 // per_s
    return list(range(start_ms, end_ms, step))


def test_a_stall_is_measured_from_the_fault_to_the_first_window_back_at_pace() -> None:
    fault = 20_000
    # 20/s before, nothing for 6 s, then the backlog and the pace again.
    completions = steady(0, fault, 20) + steady(fault + 6_000, 40_000, 20)
    found = recovery(completions, fault, 40_000)
    assert found.baseline_per_s == 20
    assert found.dipped
    assert found.longest_gap_s == 6.0
    # The first 3 s window at >= 70% of 20/s ends 8.5 s after the fault (stepping by 0.5 s).
    assert found.recovered_s is not None
    assert 8.0 <= found.recovered_s <= 9.5


def test_no_dip_is_no_recovery_time_and_a_dip_to_the_end_is_none() -> None:
    fault = 20_000
    whole = recovery(steady(0, 40_000, 20), fault, 40_000)
    assert (whole.dipped, whole.recovered_s) == (False, 0.0)
    never = recovery(steady(0, fault, 20), fault, 40_000)
    assert never.dipped
    assert never.recovered_s is None
    assert never.longest_gap_s == 20.0


def test_the_baseline_counts_only_the_time_traffic_ran() -> None:
    fault = 20_000
    # Traffic began 4 s before the fault: the baseline is its rate, not 4 s of it spread over 10.
    completions = steady(16_000, fault, 20) + steady(fault, 40_000, 20)
    found = recovery(completions, fault, 40_000)
    assert found.baseline_per_s == 20
    assert not found.dipped
