"""The throughput bench's in-process price of tracing's hooks with tracing off
(services/tools/bench/tracing_cost.py)."""

from __future__ import annotations

from inferq import tracing
from inferq.tools.bench.tracing_cost import tracing_off_cost


def test_the_hooks_are_timed_against_the_same_awaits_without_them_and_tracing_stays_off():
    cost = tracing_off_cost(iterations=2_000, repeats=2)
    assert cost["ns_per_request"] > 0 and cost["baseline_ns_per_request"] > 0
    assert (cost["iterations"], cost["repeats"]) == (2_000, 2)
    assert not tracing.enabled()
