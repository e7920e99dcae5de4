"""Pure part of `inferq bench throughput`: rates from result timestamps, medians, ratios, the tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inferq.tools.bench.machine import cell, table, verdict
from inferq.tools.measures import median

TARGET_RATE_PER_S = 2000.0
TARGET_RATIO = 0.6
BARE = "bare loop"
BACKEND = "backend alone (aiohttp)"
TRACED = "inferq, 1 dispatcher, tracing on (100% sampled, OTLP)"
SAMPLED_SHARE = 0.1
TRACED_SAMPLED = "inferq, 1 dispatcher, tracing on (10% sampled, OTLP)"
# Tracing on keeps at least this share of the untraced dispatcher's rate (median of per-run ratios).
TARGET_TRACED_RATIO = 0.9
# Tracing off: its hooks take at most this share of one request's time at the measured rate.
TARGET_OFF_SHARE = 0.01


def dispatchers_label(size: int) -> str:
    return f"inferq, {size} dispatcher{'s' if size > 1 else ''}"


def rate_per_s(stamps_ms: Sequence[int]) -> float | None:
    """Results per second from the first result to the last: (n - 1) intervals over the span.

    None for fewer than two results or a span under one millisecond (timestamps are whole ms).
    """
    if len(stamps_ms) < 2:
        return None
    span_ms = max(stamps_ms) - min(stamps_ms)
    if span_ms < 1:
        return None
    return (len(stamps_ms) - 1) / (span_ms / 1000)


@dataclass(frozen=True)
class Measurement:
    """One measured configuration in one run."""

    what: str
    count: int
    seconds: float | None
    rate_per_s: float | None


def median_rate(runs: Sequence[Mapping[str, Measurement]], what: str) -> float | None:
    return median(m.rate_per_s for m in (r.get(what) for r in runs) if m is not None)


def median_ratio(runs: Sequence[Mapping[str, Measurement]], what: str, to: str) -> float | None:
    """Median over runs of the ratio within each run (not a ratio of medians: both come from one run)."""
    ratios = []
    for run in runs:
        a, b = run.get(what), run.get(to)
        if a is not None and b is not None and a.rate_per_s and b.rate_per_s:
            ratios.append(a.rate_per_s / b.rate_per_s)
    return median(ratios)


def rates_table(
    runs: Sequence[Mapping[str, Measurement]], labels: Sequence[str], order: Sequence[str]
) -> str:
    """Requests/s per configuration and run, with the median of the runs and its ratio to the bare loop."""
    rows = []
    for what in order:
        cells = [cell(r[what].rate_per_s, ",.0f") if what in r else "-" for r in runs]
        vs_bare = "1.00" if what == BARE else cell(median_ratio(runs, what, BARE), ".2f")
        rows.append([what, *cells, cell(median_rate(runs, what), ",.0f"), vs_bare])
    head = ["configuration", *labels, "median", "vs bare loop (median of per-run ratios)"]
    return "\n".join(table(head, rows))


Row = tuple[str, str, str, str]  # target, measured, threshold, verdict


def _at_least(target: str, value: float | None, spec: str, limit: float, limit_text: str) -> Row:
    return (target, cell(value, spec), f">= {limit_text}", verdict(None if value is None else value >= limit))


def target_rows(runs: Sequence[Mapping[str, Measurement]]) -> list[Row]:
    """(target, measured, threshold, verdict) for one dispatcher."""
    one = dispatchers_label(1)
    return [
        _at_least(
            "one dispatcher, requests/s end to end (median of runs)",
            median_rate(runs, one),
            ",.0f",
            TARGET_RATE_PER_S,
            f"{TARGET_RATE_PER_S:,.0f}",
        ),
        _at_least(
            "one dispatcher / bare loop, same run (median of runs)",
            median_ratio(runs, one, BARE),
            ".2f",
            TARGET_RATIO,
            f"{TARGET_RATIO:g}",
        ),
    ]


def tracing_rows(runs: Sequence[Mapping[str, Measurement]], hooks: Mapping[str, float] | None) -> list[Row]:
    """(target, measured, threshold, verdict) for tracing on against off, and the hooks' cost when off."""
    if hooks is None:
        return []
    ratio = median_ratio(runs, TRACED, dispatchers_label(1))
    sampled = median_ratio(runs, TRACED_SAMPLED, dispatchers_label(1))
    rate = median_rate(runs, dispatchers_label(1))
    extra_ns = max(0.0, hooks["ns_per_request"] - hooks["baseline_ns_per_request"])
    share = None if not rate else extra_ns / (1e9 / rate)
    return [
        _at_least(
            "tracing on / off, one dispatcher, same run (median of runs)",
            ratio,
            ".2f",
            TARGET_TRACED_RATIO,
            f"{TARGET_TRACED_RATIO:g}",
        ),
        _at_least(
            "tracing on at 10% sampling / off (for information: the target is at 100%)",
            sampled,
            ".2f",
            TARGET_TRACED_RATIO,
            f"{TARGET_TRACED_RATIO:g}",
        ),
        (
            "tracing off: hooks' time per request / a request's time at the median rate",
            "-" if share is None else f"{share:.2%} ({extra_ns:,.0f} ns)",
            f"<= {TARGET_OFF_SHARE:.0%}",
            verdict(None if share is None else share <= TARGET_OFF_SHARE),
        ),
    ]
