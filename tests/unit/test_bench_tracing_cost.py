"""The throughput bench's in-process tracing prices (services/tools/bench/tracing_cost.py)."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from inferq import tracing
from inferq.tools.bench.tracing_cost import span_cost, traced_ceiling


def test_a_span_is_priced_without_turning_tracing_on_in_the_process():
    before = trace.get_tracer_provider()
    cost = span_cost(count=200, repeats=1)
    assert cost["start_end_us"] > 0 and cost["encode_us"] > 0
    assert cost["spans_per_request"] == 3
    assert not tracing.enabled()
    assert trace.get_tracer_provider() is before


def test_the_ceiling_is_the_requests_time_over_it_plus_its_spans():
    cost = {"spans_per_request": 3, "start_end_us": 100.0, "encode_us": 0.0}
    # 1,000 requests/s: 1 ms each; three spans of 0.1 ms: 1 / 1.3.
    assert traced_ceiling(1_000, cost) == pytest.approx(1 / 1.3)
    assert traced_ceiling(1_000, {**cost, "start_end_us": 0.0}) == pytest.approx(1.0)
