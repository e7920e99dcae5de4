"""The scheduling benchmark's trace: `infra/scenarios/bench/scheduling.toml` rescaled to the options,
with the compressed evening's shape (the dump at 0, Poisson clusters of chat and analysis, the burst)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import replace

import pytest

from inferq.messaging.tiers import Tier
from inferq.tools.bench.scenarios import TraceSpec, describe_scheduling
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.generator import generate

CHAT, ANALYSIS, BRIEF = "realtime_chat", "emotion_analysis", "morning_brief"
RATE_PER_MIN_REAL, CHAT_SHARE, CLUSTER_MEAN, BURST_SIZE = 60.0, 2 / 3, 3.0, 30


def spec_of(**options: float) -> TraceSpec:
    """The file's trace at `options`; without the bench's default surge unless asked."""
    return TraceSpec.from_file(**{"surge": 1.0, **options})


def trace_of(spec: TraceSpec) -> list[Arrival]:
    return generate(spec.scenario())


def five_sigma(spec: TraceSpec, share: float) -> tuple[float, float]:
    """Expected count of one scenario's clustered arrivals, and 5 standard deviations of it: the
    clusters are Poisson, so the variance is clusters x E[size^2], size = 1 + Poisson(mean - 1)."""
    expected = RATE_PER_MIN_REAL * spec.compress * spec.duration_s / 60 * share
    size_mean = CLUSTER_MEAN
    size_square = (size_mean - 1) + size_mean**2
    return expected, 5 * math.sqrt(expected / size_mean * size_square)


@pytest.mark.parametrize(
    "spec",
    [spec_of(), spec_of(seed=7, compress=20, duration_s=30, briefs=50)],
    ids=["default: 60 s at S=10", "30 s at S=20"],
)
def test_counts_per_kind_and_scenario_are_the_evenings(spec: TraceSpec) -> None:
    counts = Counter((a.kind, a.scenario) for a in trace_of(spec))
    assert set(counts) == {("dump", BRIEF), ("poisson", CHAT), ("poisson", ANALYSIS), ("burst", ANALYSIS)}
    assert counts[("dump", BRIEF)] == spec.briefs
    assert counts[("burst", ANALYSIS)] == BURST_SIZE
    # 60 a minute real time x S: two thirds chat, one third analysis (~400 and ~200 by default).
    for scenario, share in ((CHAT, CHAT_SHARE), (ANALYSIS, 1 - CHAT_SHARE)):
        expected, bound = five_sigma(spec, share)
        assert abs(counts[("poisson", scenario)] - expected) < bound, (scenario, counts)


def test_the_briefs_are_dumped_at_zero_and_the_burst_lands_in_its_window() -> None:
    spec = spec_of()
    trace = trace_of(spec)
    dump = [a for a in trace if a.kind == "dump"]
    assert {(a.offset_ms, a.scenario, a.tier) for a in dump} == {(0, BRIEF, Tier.LOW)}
    assert trace[: len(dump)] == dump  # the dump leads the trace
    burst = [a.offset_ms for a in trace if a.kind == "burst"]
    # 30 analyses within 1 s of wall clock at 40% of the 60 s trace.
    assert all(24_000 <= at < 25_000 for at in burst)
    assert max(burst) - min(burst) > 500  # spread over the window, not stacked at its start
    assert all(0 <= a.offset_ms < 60_000 for a in trace)
    assert [a.offset_ms for a in trace] == sorted(a.offset_ms for a in trace)
    assert [a.index for a in trace] == list(range(len(trace)))


def test_tiers_and_sessions_are_what_ingest_and_kafka_see() -> None:
    trace = trace_of(spec_of())
    tiers = {a.scenario: {b.tier for b in trace if b.scenario == a.scenario} for a in trace}
    assert tiers == {CHAT: {Tier.HIGH}, ANALYSIS: {Tier.MEDIUM}, BRIEF: {Tier.LOW}}
    chats = [a for a in trace if a.scenario == CHAT]
    assert len({a.session_id for a in chats}) <= 40  # 40 users chatting
    others = [a for a in trace if a.scenario != CHAT]
    assert len({a.session_id for a in others}) == len(others)  # a diary or a brief each
    assert all(a.messages and a.deadline_ms is None and a.start_ms == 0 for a in trace)


def dispersion(trace: list[Arrival], bin_ms: int) -> float:
    """Variance over mean of the chat and analysis arrivals per bin: 1 for Poisson arrivals, the
    mean square cluster size over the mean size (11/3 for a mean of 3) for Poisson clusters."""
    steady = Counter(a.offset_ms // bin_ms for a in trace if a.kind == "poisson")
    bins = [steady.get(i, 0) for i in range(max(steady) + 1)]
    return statistics.pvariance(bins) / statistics.mean(bins)


def test_chat_and_analysis_arrive_in_poisson_clusters() -> None:
    long = spec_of(duration_s=1200, briefs=0)  # 200 min of the real evening
    # Bins of 1 s wall clock: five times a cluster's spread (2 s real = 0.2 s at S = 10).
    assert 2.8 < dispersion(trace_of(long), 1_000) < 4.5


def test_the_trace_is_reproducible_and_described_for_the_report() -> None:
    spec = spec_of(seed=1, duration_s=30, briefs=20)
    assert trace_of(spec) == trace_of(spec)
    assert trace_of(spec) != trace_of(spec_of(seed=2, duration_s=30, briefs=20))
    described = describe_scheduling(spec, trace_of(spec))
    assert described["total"] == len(trace_of(spec))
    counts = described["counts"]
    assert isinstance(counts, dict)
    assert counts["dump/morning_brief"] == 20 and counts["burst/emotion_analysis"] == BURST_SIZE


def test_the_files_defaults_are_the_benchs_and_the_trace_scales_with_the_options() -> None:
    assert TraceSpec.from_file() == TraceSpec(seed=2233, duration_s=60.0, compress=10.0, briefs=300)
    assert (TraceSpec.from_file().surge, TraceSpec.from_file().surge_s) == (10.0, 5.0)
    # Twice the compression over half the wall clock: the same real evening, the burst at 40% still.
    burst = [a.offset_ms for a in trace_of(spec_of(compress=20, duration_s=30)) if a.kind == "burst"]
    assert all(12_000 <= at < 13_000 for at in burst)
    assert not [a for a in trace_of(spec_of(briefs=0)) if a.kind == "dump"]


def test_a_spec_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="duration"):
        spec_of(duration_s=0)
    with pytest.raises(ValueError, match="briefs"):
        spec_of(briefs=-1)


def test_the_analysis_surge_leaves_the_other_arrivals_as_they_were() -> None:
    # Away from the file's burst (at 40%, where the default surge is), so only the surge's are in its window.
    plain = trace_of(spec_of(surge=1))
    surged = trace_of(spec_of(surge=4, surge_at=0.1))
    start, end = spec_of(surge=4, surge_at=0.1).surge_window_s()
    added = [a for a in surged if a.kind == "burst" and start * 1000 <= a.offset_ms < end * 1000]

    def without_index(trace: list[Arrival]) -> list[Arrival]:
        return [replace(a, index=0) for a in trace]

    kept = [a for a in surged if a not in added]
    assert without_index(kept) == without_index(plain)
    assert len(added) == round(3 * RATE_PER_MIN_REAL * (1 - CHAT_SHARE) * 10 / 60 * (end - start))
    assert {(a.scenario, a.tier, a.deadline_ms) for a in added} == {
        (a.scenario, a.tier, a.deadline_ms) for a in plain if a.scenario == ANALYSIS
    }


def test_with_a_surge_medium_arrives_at_several_times_its_rate_in_the_window() -> None:
    spec = spec_of(surge=4, surge_s=10, surge_at=0.1)
    start, end = spec.surge_window_s()
    assert (start, end) == (6.0, 16.0)  # from 10% of the trace: while the briefs still drain
    medium = [a.offset_ms / 1000 for a in trace_of(spec) if a.tier is Tier.MEDIUM]
    # The file's own burst (30 analyses at 24 s) is not the surge: outside, the steady arrivals only.
    burst = (24.0, 25.0)
    inside = sum(start <= t < end for t in medium)
    outside = sum(not start <= t < end and not burst[0] <= t < burst[1] for t in medium)
    inside_rate = inside / (end - start)
    outside_rate = outside / (spec.duration_s - (end - start) - (burst[1] - burst[0]))
    # 4x on average; the steady part is clustered, so the seeded draw is near, not at, 4.
    assert 2.5 < inside_rate / outside_rate < 6, (inside, outside)
    described = describe_scheduling(spec, trace_of(spec))
    assert described["surge_window_s"] == [6.0, 16.0]
    assert spec_of(surge=4, surge_s=10, surge_at=0.5, duration_s=30).surge_window_s() == (15.0, 25.0)
    assert "surge_window_s" not in describe_scheduling(spec_of(surge=1), trace_of(spec_of(surge=1)))
    # By default issue 22's, 10x for 5 s, from 10% of the trace: while the briefs drain.
    assert TraceSpec.from_file().surge_window_s() == (6.0, 11.0)


def test_a_surge_out_of_range_is_refused() -> None:
    for bad in ({"surge": 0.5}, {"surge": 101}, {"surge": 2, "surge_s": 0}, {"surge": 2, "surge_at": 1}):
        with pytest.raises(ValueError, match="surge"):
            spec_of(**bad)
