"""Scenario files (infra/scenarios/*.toml), their validation, and the seeded trace generator."""

from __future__ import annotations

import itertools
import math
import statistics
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from inferq.messaging.tiers import Tier
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.errors import ScenarioError
from inferq.tools.traces.generator import generate
from inferq.tools.traces.scenario import Scenario, builtin_names, load, parse

BUILTINS = ["evening-peak", "night-batch", "overload-10x", "steady"]
X = 'duration = "1h"\n[[streams]]\nscenario = "x"\n'  # the smallest valid head of a scenario file


def per_minute(scenario: Scenario, scenarios: set[str]) -> float:
    """The mean arrival rate the file asks for (Poisson + periodic bursts), dumps excluded."""
    rate = 0.0
    for s in scenario.streams:
        if s.scenario in scenarios:
            rate += s.rate_per_min
            rate += sum(b.count * 60 / b.every_s for b in s.bursts if b.every_s)
    return rate


def test_every_builtin_loads_and_is_listed() -> None:
    assert builtin_names() == BUILTINS
    for name in BUILTINS:
        scenario = load(name)
        assert scenario.name == name
        assert scenario.backend_latency_s["inferq-fast"] == 0.5
        assert scenario.backend_args()[:2] == ["--latency", "inferq-fast=0.5"]


def test_evening_peak_is_the_seeds_evening() -> None:
    evening = load("evening-peak")
    assert evening.duration_s == 2 * 3600
    assert evening.starts_at == "20:00"
    rate = per_minute(evening, {"realtime_chat", "emotion_analysis", "recipe_recommend"})
    assert 55 <= rate <= 65, rate
    assert any(s.bursts for s in evening.streams if s.scenario == "realtime_chat")
    (brief,) = [s for s in evening.streams if s.scenario == "morning_brief"]
    assert brief.dumps[0].at_s == 0
    assert 200 <= brief.dumps[0].count <= 900  # "several hundred at 20:00"


def test_overload_is_ten_times_the_evening_and_night_is_briefs() -> None:
    interactive = {"realtime_chat", "emotion_analysis", "recipe_recommend"}
    ratio = per_minute(load("overload-10x"), interactive) / per_minute(load("evening-peak"), interactive)
    assert ratio == pytest.approx(10, rel=0.01)
    night = generate(load("night-batch"))
    counts = Counter(a.scenario for a in night)
    assert counts["morning_brief"] >= 2000
    assert counts["realtime_chat"] < counts["morning_brief"] / 10


@pytest.mark.parametrize(
    ("toml", "key"),
    [
        ('[[streams]]\nscenario = "realtime_chat"\nrate_per_min = 1', "duration"),
        ('duration = "1h"', "streams"),
        (
            'duration = "1h"\n[[streams]]\nscenario = "realtime_chat"\nrate_per_minute = 5',
            "streams[0].rate_per_minute",
        ),
        ('duration = "1h"\n[[streams]]\nrate_per_min = 5', "streams[0].scenario"),
        ('duration = "1 hour"\n[[streams]]\nscenario = "x"\nrate_per_min = 5', "duration"),
        (X + "rate_per_min = -1", "streams[0].rate_per_min"),
        ('duration = "1h"\n[[streams]]\nscenario = "x"', "streams[0].rate_per_min"),
        (
            X + 'rate_per_min = 1\npriority = "URGENT"',
            "streams[0].priority",
        ),
        (
            X + "rate_per_min = 1\nprompt_chars = 10\nprompt_tokens = 3",
            "streams[0].prompt_tokens",
        ),
        (
            X + "rate_per_min = 1\noutput_tokens = 0",
            "streams[0].output_tokens",
        ),
        (
            X + '[[streams.bursts]]\ncount = 5\nevery = "often"',
            "streams[0].bursts[0].every",
        ),
        (
            X + '[[streams.bursts]]\ncount = 5\nat = "1m"\nevery = "2m"',
            "streams[0].bursts[0].every",
        ),
        (
            X + "[[streams.bursts]]\ncount = 5",
            "streams[0].bursts[0].at",
        ),
        (
            X + "[streams.dump]\ncount = true",
            "streams[0].dump[0].count",
        ),
        (
            X + '[streams.dump]\nat = "1m"',
            "streams[0].dump[0].count",
        ),
        (
            X + '[streams.dump]\ncount = 3\nevery = "1m"',
            "streams[0].dump[0].every",
        ),
        (
            X + "rate_per_min = 1\n[backend.latency_s]\ninferq-fast = -2",
            "backend.latency_s.inferq-fast",
        ),
        ('duration = "1h"\nstarts_at = "25:00"\n[[streams]]\nscenario = "x"\nrate_per_min = 1', "starts_at"),
        ('duration = "1h"\nspeed = 3\n[[streams]]\nscenario = "x"\nrate_per_min = 1', "speed"),
        (X + "rate_per_min = 1\ncluster_mean = 0.5", "streams[0].cluster_mean"),
        (X + 'rate_per_min = 1\ncluster_mean = "3"', "streams[0].cluster_mean"),
        (X + 'rate_per_min = 1\ncluster_spread = "soon"', "streams[0].cluster_spread"),
        (X + "cluster_mean = 3\n[streams.dump]\ncount = 3", "streams[0].cluster_mean"),
        (X + 'cluster_spread = "2s"\n[streams.dump]\ncount = 3', "streams[0].cluster_spread"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key(toml: str, key: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse(tomllib.loads(toml), source="bad.toml")
    assert caught.value.key == key
    assert f"bad.toml: {key}: " in str(caught.value)


def test_an_unknown_key_error_lists_the_keys_that_exist() -> None:
    toml = X + "rate_per_minute = 5"
    with pytest.raises(ScenarioError, match=r"did you mean 'rate_per_min'\? known keys here: .*sessions"):
        parse(tomllib.loads(toml))


def test_invalid_toml_and_unknown_names_are_refused(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("duration = \n", encoding="utf-8")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load(str(broken))
    with pytest.raises(ScenarioError, match="built-ins: evening-peak"):
        load("evening-peek")
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load(str(tmp_path / "missing.toml"))


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    evening = load("evening-peak")
    assert generate(evening) == generate(evening)
    assert generate(evening, seed=7) == generate(evening, seed=7)
    assert generate(evening, seed=7) != generate(evening)


def test_the_trace_is_sorted_indexed_and_sized_as_asked() -> None:
    trace = generate(load("evening-peak"))
    assert [a.offset_ms for a in trace] == sorted(a.offset_ms for a in trace)
    assert [a.index for a in trace] == list(range(len(trace)))
    assert all(0 <= a.offset_ms < 2 * 3600 * 1000 for a in trace)
    chat = [a for a in trace if a.scenario == "realtime_chat"]
    assert {len(a.messages[0][1]) for a in chat} == {300}
    assert {a.max_tokens for a in chat} == {150}
    assert {a.tier for a in chat} == {Tier.HIGH}
    assert len({a.session_id for a in chat}) <= 40  # 40 users: their chats share sessions
    briefs = [a for a in trace if a.scenario == "morning_brief"]
    assert len({a.session_id for a in briefs}) == len(briefs)  # one brief per user
    assert all(a.deadline_ms is None for a in trace)  # the tier's default deadline


def test_the_morning_brief_dump_is_present_at_the_start() -> None:
    trace = generate(load("evening-peak"))
    dump = [a for a in trace if a.kind == "dump"]
    assert len(dump) == 400
    assert {a.scenario for a in dump} == {"morning_brief"}
    assert {a.offset_ms for a in dump} == {0}
    assert {a.tier for a in dump} == {Tier.LOW}


def test_poisson_and_burst_counts_are_within_statistical_bounds_over_a_long_window() -> None:
    toml = """
        duration = "10h"
        [[streams]]
        scenario = "realtime_chat"
        rate_per_min = 60
        [[streams.bursts]]
        count = 5
        within = "2s"
        every = "1m"
    """
    trace = generate(parse(tomllib.loads(toml)))
    poisson = [a for a in trace if a.kind == "poisson"]
    expected = 60 * 600
    # A Poisson count's standard deviation is the square root of its mean: 5 sigma is one in 3.5 million.
    assert abs(len(poisson) - expected) < 5 * math.sqrt(expected), len(poisson)
    # Each hour on its own is near its mean too: the rate holds across the window, not only on average.
    per_hour = Counter(a.offset_ms // 3_600_000 for a in poisson)
    assert all(abs(n - 3600) < 5 * 60 for n in per_hour.values()), per_hour
    bursts = [a for a in trace if a.kind == "burst"]
    assert len(bursts) == 5 * 600
    starts = Counter(a.offset_ms // 60_000 for a in bursts)
    assert set(starts.values()) == {5}
    assert all(a.offset_ms % 60_000 <= 2_000 for a in bursts)


def test_editing_one_stream_leaves_the_others_arrivals_unchanged() -> None:
    base = tomllib.loads(Path(load("evening-peak").source).read_text(encoding="utf-8"))
    edited = tomllib.loads(Path(load("evening-peak").source).read_text(encoding="utf-8"))
    edited["streams"][2]["rate_per_min"] = 20  # recipes only

    def chat_offsets(data: dict[str, object]) -> list[int]:
        return [a.offset_ms for a in generate(parse(data)) if a.scenario == "realtime_chat"]

    assert chat_offsets(base) == chat_offsets(edited)


def test_explicit_priority_and_deadline_reach_the_arrivals() -> None:
    toml = """
        duration = "10m"
        [[streams]]
        scenario = "morning_brief"
        priority = "HIGH"
        deadline = "90s"
        prompt_tokens = 25
        [streams.dump]
        count = 3
        at = "1m"
    """
    trace = generate(parse(tomllib.loads(toml)))
    assert [a.offset_ms for a in trace] == [60_000] * 3
    assert {(a.tier, a.priority, a.deadline_ms) for a in trace} == {(Tier.HIGH, Tier.HIGH, 90_000)}
    assert {len(a.messages[0][1]) for a in trace} == {100}


def clustered(mean: float, spread: str, *, rate_per_min: float = 60, duration: str = "10h") -> list[Arrival]:
    toml = f"""
        duration = "{duration}"
        [[streams]]
        scenario = "realtime_chat"
        rate_per_min = {rate_per_min}
        cluster_mean = {mean}
        cluster_spread = "{spread}"
    """
    return generate(parse(tomllib.loads(toml)))


def test_clustered_arrivals_keep_the_rate_and_come_in_clusters_of_the_mean_size() -> None:
    trace = clustered(3, "0s", duration="5h")
    assert {a.kind for a in trace} == {"poisson"}
    # No spread: a cluster's arrivals share one instant, so clusters can be counted and measured.
    together = Counter(a.offset_ms for a in trace)
    expected = 60 * 300
    # Clusters are Poisson (6,000 expected); sizes 1 + Poisson(2) have E[size^2] = 11.
    assert abs(together.total() - expected) < 5 * math.sqrt(expected / 3 * 11), together.total()
    assert abs(len(together) - expected / 3) < 5 * math.sqrt(expected / 3)
    assert 2.85 < statistics.mean(together.values()) < 3.15
    assert 1.7 < statistics.pvariance(together.values()) < 2.3  # 1 + Poisson(2): variance 2


def test_a_clusters_arrivals_are_spread_over_its_spread() -> None:
    # A cluster every 5 minutes on average: clusters seldom overlap, so a gap of over 10 s parts them.
    offsets = [a.offset_ms for a in clustered(3, "2s", rate_per_min=0.6, duration="100h")]
    groups: list[list[int]] = [[offsets[0]]]
    for before, at in itertools.pairwise(offsets):
        if at - before > 10_000:
            groups.append([])
        groups[-1].append(at)
    spans = [g[-1] - g[0] for g in groups if len(g) > 1]
    assert sum(span <= 2_000 for span in spans) / len(spans) > 0.9
    # Uniform over 2 s, not stacked: three arrivals span 1 s on average.
    assert 700 < statistics.mean(s for s in spans if s <= 2_000) < 1_300
