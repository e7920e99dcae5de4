"""Pure part of `inferq bench latency`: per-request timestamps joined into steps, percentiles, verdicts.

Every instant is read from one machine's wall clock, by different processes: the client (202), ingest
(`created_at_ms`), the broker (LogAppendTime), the dispatcher (the fetch probe; `dispatched_at_ms`)
and the recording backend (arrival). Instants in whole milliseconds (`*_ms`) make a step up to 1 ms
off either way; nanosecond ones (`*_ns`) are exact to the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from inferq.tools.bench.machine import Column, columns_table, figure, table, verdict
from inferq.tools.measures import median, percentile

TARGET_P50_MS = 5.0
TARGET_P99_MS = 25.0
HEADLINE = "202 → backend received"


@dataclass(frozen=True)
class Sample:
    """One request's instants. `appended_ms` is None when the topic kept producer timestamps;
    `consumed_ns` is None when the dispatcher ran without the fetch probe."""

    request_id: str
    due_ns: int
    sent_ns: int
    answered_ns: int
    created_ms: int
    appended_ms: int | None
    consumed_ns: int | None
    dispatched_ms: int
    received_ns: int


@dataclass(frozen=True)
class Joined:
    samples: list[Sample]
    # Accepted requests that the backend never saw, or whose record or result was not found.
    missing: dict[str, list[str]]


@dataclass(frozen=True)
class Placed:
    """Where a request's record was found on its topic, and what it said."""

    key: str
    created_ms: int
    appended_ms: int | None


def join(
    answered: Mapping[str, tuple[int, int, int]],
    placed: Mapping[str, Placed],
    consumed_ns: Mapping[str, int] | None,
    dispatched_ms: Mapping[str, int],
    received_ns: Mapping[str, int],
) -> Joined:
    """Join by request_id. `answered` holds (due_ns, sent_ns, answered_ns) of every accepted, measured
    request; `consumed_ns` is keyed by record (`topic:partition:offset`, as `placed[...].key`)."""
    samples: list[Sample] = []
    missing: dict[str, list[str]] = {"record": [], "backend": [], "result": [], "fetch probe": []}
    for request_id, (due, sent, answer) in answered.items():
        where = placed.get(request_id)
        received = received_ns.get(request_id)
        dispatched = dispatched_ms.get(request_id)
        consumed = consumed_ns.get(where.key) if consumed_ns is not None and where is not None else None
        if where is None:
            missing["record"].append(request_id)
        if received is None:
            missing["backend"].append(request_id)
        if dispatched is None:
            missing["result"].append(request_id)
        if consumed_ns is not None and where is not None and consumed is None:
            missing["fetch probe"].append(request_id)
        if where is None or received is None or dispatched is None:
            continue
        samples.append(
            Sample(
                request_id,
                due,
                sent,
                answer,
                where.created_ms,
                where.appended_ms,
                consumed,
                dispatched,
                received,
            )
        )
    return Joined(samples, {k: sorted(v) for k, v in missing.items() if v})


Step = Callable[[Sample], float | None]


def _ms(ns: int) -> float:
    return ns / 1e6


def _after_append(end: Callable[[Sample], float]) -> Step:
    return lambda s: None if s.appended_ms is None else end(s) - s.appended_ms


# (name, what it measures, how); in the order a request lives them. Headline first.
STEPS: list[tuple[str, str, Step]] = [
    (
        HEADLINE,
        "the added latency: client's 202 to the backend's handler starting (ns)",
        lambda s: _ms(s.received_ns - s.answered_ns),
    ),
    (
        "broker append → backend received",
        "the same from the broker's LogAppendTime, before ingest's ack and its HTTP answer (ms)",
        _after_append(lambda s: _ms(s.received_ns)),
    ),
    (
        "append → consumed",
        "broker append to the dispatcher's fetch returning the record (fetch probe, ns)",
        lambda s: (
            None if s.appended_ms is None or s.consumed_ns is None else _ms(s.consumed_ns) - s.appended_ms
        ),
    ),
    (
        "consumed → dispatched",
        "fetch to the request taking its token (`dispatched_at_ms`)",
        lambda s: None if s.consumed_ns is None else s.dispatched_ms - _ms(s.consumed_ns),
    ),
    (
        "append → dispatched",
        "both steps above in one, from the records alone (no probe needed)",
        _after_append(lambda s: float(s.dispatched_ms)),
    ),
    (
        "dispatched → backend received",
        "token taken to the backend's handler: the dispatcher's HTTP call",
        lambda s: _ms(s.received_ns) - s.dispatched_ms,
    ),
    (
        "client: sent → 202",
        "context: ingest's answer time, with the produce and its acknowledgement",
        lambda s: _ms(s.answered_ns - s.sent_ns),
    ),
    (
        "ingest: created_at_ms → broker append",
        "context: ingest's produce leg, body validated to record appended",
        lambda s: None if s.appended_ms is None else float(s.appended_ms - s.created_ms),
    ),
]


@dataclass(frozen=True)
class Dist:
    count: int
    p50: float
    p90: float
    p99: float
    max: float


def dist(values: Sequence[float]) -> Dist | None:
    if not values:
        return None
    return Dist(
        len(values), percentile(values, 50), percentile(values, 90), percentile(values, 99), max(values)
    )


def step_stats(samples: Sequence[Sample]) -> dict[str, Dist | None]:
    out: dict[str, Dist | None] = {}
    for name, _, step in STEPS:
        values = [v for v in (step(s) for s in samples) if v is not None]
        out[name] = dist(values)
    return out


@dataclass(frozen=True)
class Second:
    """One second of a run (by due time): the headline's median and max, and the client's own lag,
    which tells a stall of the whole machine (the client is late too) from one of the pipeline."""

    second: int
    count: int
    headline_p50: float
    headline_max: float
    append_to_consumed_max: float | None
    client_lag_max: float


def timeline(samples: Sequence[Sample]) -> list[Second]:
    if not samples:
        return []
    start = min(s.due_ns for s in samples)
    buckets: dict[int, list[Sample]] = {}
    for s in samples:
        buckets.setdefault(int((s.due_ns - start) // 1_000_000_000), []).append(s)
    seconds = []
    for second, group in sorted(buckets.items()):
        head = [_ms(s.received_ns - s.answered_ns) for s in group]
        fetch = [
            _ms(s.consumed_ns) - s.appended_ms
            for s in group
            if s.consumed_ns is not None and s.appended_ms is not None
        ]
        seconds.append(
            Second(
                second,
                len(group),
                percentile(head, 50),
                max(head),
                max(fetch) if fetch else None,
                max(_ms(s.sent_ns - s.due_ns) for s in group),
            )
        )
    return seconds


def worst_seconds(seconds: Sequence[Second], n: int = 3) -> list[Second]:
    return sorted(sorted(seconds, key=lambda s: s.headline_max, reverse=True)[:n], key=lambda s: s.second)


SECOND_COLUMNS: list[Column] = [
    ("second", lambda s: s.second),
    ("n", lambda s: s.count),
    ("added p50 ms", figure("headline_p50")),
    ("added max ms", figure("headline_max")),
    ("append → consumed max ms", figure("append_to_consumed_max")),
    ("client lag max ms", figure("client_lag_max")),
]


def seconds_table(seconds: Sequence[Second]) -> str:
    return columns_table(SECOND_COLUMNS, seconds)


def within(value: float | None, limit: float) -> str:
    return verdict(None if value is None else value <= limit)


def median_of(runs: Sequence[Mapping[str, Dist | None]], step: str, field: str) -> float | None:
    return median(getattr(d, field) for d in (r.get(step) for r in runs) if d is not None)


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text  # a rounding artefact of whole-ms instants, not a sign


def _pair(d: Dist | None) -> str:
    return "-" if d is None else f"{_cell(d.p50)} / {_cell(d.p99)}"


def steps_table(stats: Mapping[str, Dist | None]) -> str:
    rows = []
    for name, what, _ in STEPS:
        d = stats.get(name)
        values = ["-"] * 4 if d is None else [_cell(v) for v in (d.p50, d.p90, d.p99, d.max)]
        rows.append([name, what, 0 if d is None else d.count, *values])
    return "\n".join(table("step | what | n | p50 ms | p90 ms | p99 ms | max ms", rows))


def runs_table(runs: Sequence[Mapping[str, Dist | None]], labels: Sequence[str]) -> str:
    """Per run: the headline p50/p99 and the breakdown's p50s; then the median of the runs."""
    shown = [HEADLINE, "broker append → backend received", "append → consumed", "consumed → dispatched"]
    shown += ["dispatched → backend received"]
    rows: list[list[object]] = []
    for label, run in zip(labels, runs, strict=True):
        head = run.get(HEADLINE)
        rows.append([label, head.count if head else 0, *(_pair(run.get(s)) for s in shown)])
    medians = [f"{_cell(median_of(runs, s, 'p50'))} / {_cell(median_of(runs, s, 'p99'))}" for s in shown]
    rows.append(["**median of runs**", "", *medians])
    return "\n".join(table(["run", "n", *(f"{s} p50 / p99 ms" for s in shown)], rows))


def target_rows(runs: Sequence[Mapping[str, Dist | None]]) -> list[tuple[str, float | None, float, str]]:
    """(target, measured median of the runs, limit, verdict) for the two latency targets."""
    p50 = median_of(runs, HEADLINE, "p50")
    p99 = median_of(runs, HEADLINE, "p99")
    return [
        ("added latency p50 (median of runs)", p50, TARGET_P50_MS, within(p50, TARGET_P50_MS)),
        ("added latency p99 (median of runs)", p99, TARGET_P99_MS, within(p99, TARGET_P99_MS)),
    ]
