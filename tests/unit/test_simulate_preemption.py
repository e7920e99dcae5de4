"""`inferq simulate` with preemption: the simulation cancels lent calls with the dispatcher's own
decision (``preemption.victim_to_cancel``), and shows what that cost. Hand-checked timelines,
properties on random traces, the evening with an analysis surge, and the command line."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from inferq.cli import main
from inferq.dispatcher import preemption
from inferq.dispatcher.preemption import RunningCall, ceiling_of
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.tiers import Tier
from inferq.tools.report.timeseries import tokens_in_use
from inferq.tools.simulation import _engine
from inferq.tools.simulation.simulate import SimConfig, SimResult, sim_config, sim_scheduler, simulate
from tests.unit.test_simulate import (
    PEAK_MS,
    arrival,
    arrivals_strategy,  # the simulator's random traces
    by_id,
)

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
ALL = frozenset(Tier)
LATENCY = {H: 0.5, M: 2.8, L: 5.0}


def run(
    arrivals: list[Any], *, budget: int = 10, latency: dict[Tier, float] | None = None, **config: Any
) -> SimResult:
    schedule = Schedule.default(budget=budget).pin("peak")
    return simulate(
        arrivals, sim_scheduler("inferq", schedule), latency or LATENCY, SimConfig(budget=budget, **config)
    )


# -- hand-checked timelines ----------------------------------------------------------------------


def test_a_chat_takes_back_the_youngest_lent_brief_which_waits_again_ahead_of_newer_ones() -> None:
    # Peak, budget 10, LOW's ceiling 1: eleven briefs 1 ms apart, ten start (lent every idle slot),
    # b10 waits. A chat at 1 s finds no slot: the youngest brief (b9, started at 9 ms) is cancelled,
    # the chat starts at once. At 1.5 s the chat ends: b9 starts again before the newer b10, which
    # waits for the first brief to end (5 s).
    briefs = [arrival(f"b{i}", L, i) for i in range(11)]
    out = run([*briefs, arrival("chat", H, 1_000)], preemptible=ALL)
    got = by_id(out)
    assert got["chat"].dispatched_ms == PEAK_MS + 1_000
    assert got["b9"].dispatched_ms == PEAK_MS + 1_500
    assert got["b9"].completed_ms == PEAK_MS + 6_500
    assert got["b10"].dispatched_ms == PEAK_MS + 5_000
    assert all(o.status == "OK" for o in out.outcomes)
    cost = out.preemption
    assert cost.preemptions == {H: 0, M: 0, L: 1}
    assert cost.discarded_call_ms == 991
    # A recorded trace carries no token estimate: the dispatcher's default, 256 completion tokens,
    # of which the call had run 0.991 s of its tier's typical 5 s.
    assert cost.discarded_tokens == {H: 0, M: 0, L: round(256 * 991 / 5_000)}
    assert cost.served_tokens == 12 * 256


def test_without_a_preemptible_backend_the_chat_takes_the_headroom_and_nothing_is_cancelled() -> None:
    briefs = [arrival(f"b{i}", L, 0) for i in range(11)]
    out = run([*briefs, arrival("chat", H, 1_000)])
    assert by_id(out)["chat"].dispatched_ms == PEAK_MS + 1_000
    assert by_id(out)["b1"].dispatched_ms == PEAK_MS + 5_000  # the ceiling: one brief at a time
    assert sum(out.preemption.preemptions.values()) == 0
    assert out.preemption.discarded_call_ms == 0


def test_a_load_generators_token_estimate_prices_the_discarded_call() -> None:
    # A generated trace's arrivals carry what the load generator sends (here max_tokens 1000).
    briefs = [replace(arrival(f"b{i}", L, 0), kind="dump", max_tokens=1000) for i in range(10)]
    out = run([*briefs, arrival("chat", H, 2_500)], preemptible=ALL)
    # b9 ran 2.5 s of 5 s: half of its 1000 max tokens (no prompt).
    assert out.preemption.discarded_tokens[L] == 500


def test_the_limit_stops_the_lending_and_is_counted() -> None:
    # Ten briefs at 0 s, chats at 1 s and 2 s. Without a binding limit b9 is cancelled for the first
    # chat, lent the slot again at 1.5 s, and, the youngest again, cancelled for the second. With
    # max_preemptions 1 it reaches the limit at once: lent no slot past LOW's ceiling, it waits until
    # the other briefs end (5 s), and the second chat finds the slot it left.
    briefs = [arrival(f"b{i}", L, 0) for i in range(10)]
    chats = [arrival("c1", H, 1_000), arrival("c2", H, 2_000)]
    again = run([*briefs, *chats], preemptible=ALL, max_preemptions=3)
    assert by_id(again)["b9"].dispatched_ms == PEAK_MS + 2_500
    assert again.preemption.preemptions[L] == 2 and again.preemption.limit_reached[L] == 0
    limited = run([*briefs, *chats], preemptible=ALL, max_preemptions=1)
    got = by_id(limited)
    assert got["c1"].dispatched_ms == PEAK_MS + 1_000 and got["c2"].dispatched_ms == PEAK_MS + 2_000
    assert got["b9"].dispatched_ms == PEAK_MS + 5_000
    assert limited.preemption.preemptions[L] == 1 and limited.preemption.limit_reached[L] == 1
    assert all(o.status == "OK" for o in limited.outcomes)


# -- properties -------------------------------------------------------------------------------------


@contextmanager
def watched_decisions() -> Iterator[list[tuple[RunningCall, dict[Tier, int], int]]]:
    """Every victim the simulation cancels, with its tier's calls in flight and ceiling just then
    (the engine's own state, as it asked the decision)."""
    seen: list[tuple[RunningCall, dict[Tier, int], int]] = []
    decide: Callable[..., RunningCall | None] = preemption.victim_to_cancel

    def spy(calls: list[RunningCall], **kwargs: Any) -> RunningCall | None:
        victim = decide(calls, **kwargs)
        if victim is not None:
            ceiling = ceiling_of(kwargs["window"], victim.tier, kwargs["budget"])
            seen.append((victim, dict(kwargs["in_use"]), ceiling))
        return victim

    with mock.patch.object(_engine, "victim_to_cancel", spy):
        yield seen


@settings(max_examples=150, deadline=None)
@given(
    raw=arrivals_strategy,
    # A dump of briefs first, so that slots are lent and there is something to take back.
    dump=st.integers(0, 25),
    budget=st.integers(1, 8),
    preemptible=st.sampled_from([ALL, frozenset({L}), frozenset({M, L})]),
    max_preemptions=st.integers(0, 3),
    latency=st.tuples(*[st.floats(0.05, 8.0)] * 3),
    readahead=st.integers(1, 5),
)
def test_preempting_answers_each_arrival_once_within_the_budget_and_never_below_a_ceiling(
    raw: list[tuple[int, Tier, int, bool]],
    dump: int,
    budget: int,
    preemptible: frozenset[Tier],
    max_preemptions: int,
    latency: tuple[float, float, float],
    readahead: int,
) -> None:
    trace = [arrival(f"d{i}", L, 0) for i in range(dump)] + [
        arrival(f"r{i}", tier, at, deadline if short else None)
        for i, (at, tier, deadline, short) in enumerate(raw)
    ]
    with watched_decisions() as cancelled:
        result = run(
            trace,
            budget=budget,
            latency=dict(zip(Tier, latency, strict=True)),
            preemptible=preemptible,
            max_preemptions=max_preemptions,
            readahead_per_tier=readahead,
        )
    event("preempted" if cancelled else "nothing preempted")
    assert [o.request_id for o in result.outcomes] == [a.request_id for a in trace]
    assert all(o.status in {"OK", "EXPIRED"} for o in result.outcomes)
    assert result.max_in_flight <= budget
    assert tokens_in_use(result.outcomes).peak <= budget
    for victim, in_use, ceiling in cancelled:
        assert victim.tier is not H
        assert victim.tier in preemptible
        # Lent at its start (past its ceiling or into the headroom), or its tier past its ceiling.
        assert victim.lent or in_use[victim.tier] - 1 >= ceiling
    times = Counter(trace[victim.key].request_id for victim, _, _ in cancelled)
    assert all(n <= max_preemptions for n in times.values())
    cost = result.preemption
    assert cost.preemptions[H] == 0
    assert sum(cost.preemptions.values()) == len(cancelled)
    assert sum(cost.limit_reached.values()) == sum(n == max_preemptions for n in times.values())


# -- the evening with an analysis surge -------------------------------------------------------------


def surge_evening() -> list[Any]:
    """tests/unit/test_simulate.py's evening: 200 briefs at 20:00, a chat every 400 ms, 100
    analyses at 10 a second from 60 s (more than MEDIUM's slots serve within their 30 s)."""
    chats = [arrival(f"c{i}", H, 100 + 400 * i) for i in range(300)]
    briefs = [arrival(f"b{i}", L, 0) for i in range(200)]
    surge = [arrival(f"a{i}", M, 60_000 + 100 * i) for i in range(100)]
    return chats + briefs + surge


def high_waits_ms(result: SimResult) -> list[int]:
    return sorted(o.dispatched_ms - o.enqueued_ms for o in result.outcomes if o.tier is H and o.dispatched_ms)


def analyses_in_time(result: SimResult) -> int:
    return sum(o.tier is M and o.status == "OK" for o in result.outcomes)


def low_makespan_s(result: SimResult) -> float:
    return (max(o.completed_ms for o in result.outcomes if o.tier is L) - PEAK_MS) / 1000


def test_preempting_the_briefs_lends_every_idle_slot_without_costing_chat_or_analyses() -> None:
    """The briefs' backend frees a slot at hang-up (LOW preemptible): chats wait no longer than
    under the seed's ceilings (0 ms), at least as many analyses make their deadline (86 against 84
    of 100), and the briefs finish in under a quarter of the time (225 s against 1000 s), for 2% of
    the call time and 0.9% of the tokens."""
    capped = run(surge_evening())
    preempting = run(surge_evening(), preemptible=frozenset({L}))
    assert high_waits_ms(preempting)[-1] <= high_waits_ms(capped)[-1]
    assert analyses_in_time(preempting) >= analyses_in_time(capped)
    assert low_makespan_s(preempting) < low_makespan_s(capped) / 4
    cost = preempting.preemption
    assert cost.preemptions[L] > 0 and cost.preemptions[H] == cost.preemptions[M] == 0
    assert cost.discarded_call_ms < 0.05 * cost.served_call_ms
    assert sum(cost.discarded_tokens.values()) < 0.05 * cost.served_tokens
    assert preempting.max_in_flight <= 10
    assert all(o.status == "OK" for o in preempting.outcomes if o.tier is not M)


def test_with_every_tier_preemptible_analyses_gain_the_headroom_and_chats_take_it_back() -> None:
    """One preemptible backend for all (INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE=true): analyses are
    lent the HIGH headroom on the surge (98 in time against 84 capped) and chats take it back (they
    wait no longer than capped, 0 ms); the briefs finish in under a quarter of the capped time.
    Before a call in the headroom was marked lent, a preemptible MEDIUM within its ceiling took the
    headroom as its own and chats waited up to 0.7 s."""
    capped = run(surge_evening())
    preempting = run(surge_evening(), preemptible=ALL)
    assert high_waits_ms(preempting)[-1] <= high_waits_ms(capped)[-1]
    assert analyses_in_time(preempting) > analyses_in_time(capped)
    assert low_makespan_s(preempting) < low_makespan_s(capped) / 4
    cost = preempting.preemption
    assert cost.preemptions[H] == 0 and cost.preemptions[M] > 0
    assert sum(cost.discarded_tokens.values()) < 0.05 * cost.served_tokens


# -- settings and the command line ------------------------------------------------------------------


def test_sim_config_takes_the_dispatchers_preemptible_tiers_and_limit() -> None:
    assert sim_config(DispatcherSettings()).preemptible == frozenset()
    preemptible = DispatcherSettings(backend_preemptible=True, max_preemptions=1)
    assert sim_config(preemptible).preemptible == ALL
    assert sim_config(preemptible).max_preemptions == 1
    # Only the briefs go to a self-hosted server: only LOW is lent every idle slot and preempted.
    briefs_self_hosted = DispatcherSettings(
        backends={"selfhosted": {"url": "http://127.0.0.1:9", "preemptible": True}},
        tier_backends={L: ["selfhosted"]},
    )
    assert sim_config(briefs_self_hosted).preemptible == frozenset({L})
    with pytest.raises(ValueError, match="max_preemptions"):
        SimConfig(max_preemptions=-1)


def write_trace(path: Path) -> Path:
    lines = [{"offset_ms": 0, "tier": "LOW"} for _ in range(11)] + [{"offset_ms": 1_000, "tier": "HIGH"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_simulate_preemptible_prints_and_writes_what_preemption_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE", raising=False)
    monkeypatch.delenv("INFERQ_BACKEND_PREEMPTIBLE", raising=False)
    trace = write_trace(tmp_path / "evening.jsonl")
    out = tmp_path / "sim.json"
    assert main(["simulate", str(trace), "--pin", "peak", "--preemptible", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sim inferq, preemption, evening" in printed
    low = next(line for line in printed.splitlines() if line.startswith("LOW ") and "  " in line[4:12])
    assert low.split()[1:] == ["1", "51", "0"]  # preempted, tokens discarded, limit reached
    assert "discarded: 1.0 s of backend calls" in printed
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["params"]["preemption"]["LOW"] == [1, 51, 0]
    assert doc["params"]["preemption_cost"]["discarded_call_ms"] == 1_000
    assert doc["params"]["config"]["preemptible"] == ["HIGH", "LOW", "MEDIUM"]


def test_simulate_takes_preemption_from_the_dispatchers_environment_and_the_flag_overrides_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = write_trace(tmp_path / "evening.jsonl")
    monkeypatch.setenv("INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE", "true")
    monkeypatch.setenv("INFERQ_DISPATCHER_MAX_PREEMPTIONS", "0")
    assert main(["simulate", str(trace), "--pin", "peak"]) == 0
    printed = capsys.readouterr().out
    assert "preemption" in printed.splitlines()[0]
    assert "discarded: 0.0 s" in printed  # the limit 0: nothing lent, nothing cancelled
    assert main(["simulate", str(trace), "--pin", "peak", "--max-preemptions", "2"]) == 0
    assert "discarded: 1.0 s" in capsys.readouterr().out
    assert main(["simulate", str(trace), "--pin", "peak", "--no-preemptible"]) == 0
    assert "discarded:" not in capsys.readouterr().out


def test_simulate_refuses_a_negative_preemption_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_trace(tmp_path / "evening.jsonl")
    assert main(["simulate", str(trace), "--max-preemptions", "-1"]) == 2
    assert "max_preemptions" in capsys.readouterr().out
