"""`inferq bench <name>`'s options come from its spec's fields: what a user types reaches the spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferq.cli import main
from inferq.tools.bench.specs import DeliverySpec, LatencySpec, SessionSetting, TakeoverSpec, ThroughputSpec


def _spec_of(monkeypatch: pytest.MonkeyPatch, bench: str, *argv: str) -> Any:
    """The spec `inferq bench <bench> *argv` hands its bench's run (which is not started)."""
    handed: list[Any] = []

    def run(spec: Any, *_: Any, out: Path, home: Path) -> int:
        assert (out, home) == (Path("bench-results"), Path(".inferq/bench").resolve())
        handed.append(spec)
        return 0

    monkeypatch.setattr(f"inferq.tools.bench.{bench}.run", run)
    assert main(["bench", bench, *argv]) == 0
    return handed[0]


def test_with_no_options_every_bench_runs_its_specs_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _spec_of(monkeypatch, "latency") == LatencySpec()
    assert _spec_of(monkeypatch, "delivery") == DeliverySpec()
    assert _spec_of(monkeypatch, "throughput") == ThroughputSpec()
    assert _spec_of(monkeypatch, "takeover") == TakeoverSpec()


def test_each_option_sets_its_field_switches_and_lists_included(monkeypatch: pytest.MonkeyPatch) -> None:
    latency = _spec_of(monkeypatch, "latency", "--rate", "50", "--duration", "4", "--no-probe", "--runs", "1")
    assert latency == LatencySpec(rate_per_s=50.0, duration_s=4.0, probe=False, runs=1)
    delivery = _spec_of(
        monkeypatch,
        "delivery",
        "--chunk-linger-ms",
        "2.5",
        "--warmup",
        "1",
        "--rates",
        "20,50",
        "--runs",
        "1",
    )
    assert delivery == DeliverySpec(chunk_linger_ms=2.5, warmup_s=1.0, rates_per_s=(20.0, 50.0), runs=1)
    throughput = _spec_of(
        monkeypatch,
        "throughput",
        *("--dispatchers", "1,3", "--dispatcher-env", "A=1", "--dispatcher-env", "B=x=y"),
        *("--no-tracing", "--cluster", "--profile", "--records", "10"),
    )
    assert throughput == ThroughputSpec(
        records=10,
        group_sizes=(1, 3),
        dispatcher_env={"A": "1", "B": "x=y"},
        tracing=False,
        cluster=True,
        profile=True,
    )
    takeover = _spec_of(monkeypatch, "takeover", "--settings", "2000/500,10000/3000", "--soak", "3")
    assert takeover == TakeoverSpec(
        settings=(SessionSetting(2000, 500), SessionSetting(10000, 3000)), soak_s=3.0
    )


def test_the_scheduling_bench_has_an_analysis_surge_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from inferq.tools.bench.scenarios import TraceSpec

    handed: list[TraceSpec] = []

    def run(spec: TraceSpec, runs: list[str], **_: Any) -> int:
        handed.append(spec)
        return 0

    monkeypatch.setattr("inferq.tools.bench.scheduling.run", run)
    assert main(["bench", "scheduling"]) == 0
    assert main(["bench", "scheduling", "--surge", "4", "--surge-seconds", "8", "--surge-at", "0.2"]) == 0
    assert handed == [TraceSpec.from_file(), TraceSpec.from_file(surge=4.0, surge_s=8.0, surge_at=0.2)]
    assert (handed[0].surge, handed[0].surge_s, handed[0].surge_at) == (10, 5, 0.1)
