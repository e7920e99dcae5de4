"""`inferq bench fallback`'s figures: pure, from the outcomes and the two backends' answer counts
sampled over time, so a unit test checks them.

- **failed**: requests whose outcome is not OK, apart from EXPIRED ones (their deadline passed
  while they waited; the goal counts them apart), plus those with no outcome at all. Goal 0.
- **time to switch**: from the primary's outage starting to the spare's first answer.
- **time to switch back**: from the outage ending to the primary's first answer after it, and to
  the spare's last answer (every call back on the primary).
- chat's end-to-end latency before, during and after the outage (p50 / p99).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from inferq.messaging.records import InferenceResult, Status
from inferq.messaging.tiers import Tier
from inferq.tools.bench.machine import table, verdict
from inferq.tools.measures import percentile


@dataclass(frozen=True)
class Sample:
    """The backends' 200 answers so far, at `t_s` seconds from the start of the run."""

    t_s: float
    primary: int
    spare: int


@dataclass(frozen=True)
class FallbackFigures:
    sent: int
    by_status: dict[str, int]
    missing: int
    failed: int
    expired: int
    switch_s: float | None
    first_back_s: float | None
    all_back_s: float | None
    primary_refused: int
    chat_e2e_ms: dict[str, tuple[float, float] | None]


def first_increase(samples: Sequence[Sample], after_s: float, which: str) -> float | None:
    """The time of the first sample after `after_s` whose count of `which` grew over the last
    sample at or before `after_s`."""
    before = [s for s in samples if s.t_s <= after_s]
    base = getattr(before[-1], which) if before else 0
    for s in samples:
        if s.t_s > after_s and getattr(s, which) > base:
            return s.t_s
    return None


def last_increase(samples: Sequence[Sample], which: str) -> float | None:
    """The time of the last sample whose count of `which` grew over the one before it."""
    last = None
    for previous, s in itertools.pairwise(samples):
        if getattr(s, which) > getattr(previous, which):
            last = s.t_s
    return last


def chat_latency(
    results: Sequence[InferenceResult], start_ms: int, phases: Mapping[str, tuple[float, float]]
) -> dict[str, tuple[float, float] | None]:
    """Chat's end-to-end p50 and p99 (ms) per phase, by when each request was accepted."""
    figures: dict[str, tuple[float, float] | None] = {}
    for name, (begin_s, end_s) in phases.items():
        values = [
            float(r.end_to_end_ms)
            for r in results
            if r.tier is Tier.HIGH
            and r.status is Status.OK
            and begin_s <= (r.enqueued_at_ms - start_ms) / 1000 < end_s
        ]
        figures[name] = (percentile(values, 50), percentile(values, 99)) if values else None
    return figures


def figures(
    *,
    sent: int,
    results: Sequence[InferenceResult],
    samples: Sequence[Sample],
    start_ms: int,
    outage: tuple[float, float],
    end_s: float,
    primary_refused: int,
) -> FallbackFigures:
    by_status: dict[str, int] = {}
    for r in results:
        by_status[r.status.value] = by_status.get(r.status.value, 0) + 1
    missing = sent - len(results)
    expired = by_status.get(Status.EXPIRED.value, 0)
    failed = len(results) - by_status.get(Status.OK.value, 0) - expired + missing
    began, ended = outage
    switch = first_increase(samples, began, "spare")
    first_back = first_increase(samples, ended, "primary")
    last_spare = last_increase(samples, "spare")
    return FallbackFigures(
        sent=sent,
        by_status=by_status,
        missing=missing,
        failed=failed,
        expired=expired,
        switch_s=None if switch is None else switch - began,
        first_back_s=None if first_back is None else first_back - ended,
        all_back_s=None if last_spare is None or last_spare < ended else last_spare - ended,
        primary_refused=primary_refused,
        chat_e2e_ms=chat_latency(
            results, start_ms, {"before": (0.0, began), "during": (began, ended), "after": (ended, end_s)}
        ),
    )


def markdown(f: FallbackFigures, header: str, breaker: str) -> str:
    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.2f} s"

    def latency(phase: str) -> str:
        pair = f.chat_e2e_ms.get(phase)
        return "-" if pair is None else f"{pair[0]:.0f} / {pair[1]:.0f}"

    statuses = ", ".join(f"{k} {v}" for k, v in sorted(f.by_status.items()))
    return "\n".join(
        [
            "# Fallback: the primary backend down for a period",
            "",
            header,
            f"Breaker: {breaker}.",
            "",
            *table("figure | measured"),
            f"| requests sent / outcomes | {f.sent} / {statuses}; {f.missing} without an outcome |",
            f"| requests failed, EXPIRED apart (goal 0) | {f.failed} ({verdict(f.failed == 0)}); "
            f"EXPIRED {f.expired} |",
            f"| time to switch (outage begins -> the spare's first answer) | {seconds(f.switch_s)} |",
            f"| time to switch back (outage ends -> the primary's first answer) | "
            f"{seconds(f.first_back_s)} |",
            f"| every call back on the primary (outage ends -> the spare's last answer) | "
            f"{seconds(f.all_back_s)} |",
            f"| calls the primary refused (503) during the outage | {f.primary_refused} |",
            f"| chat end-to-end p50 / p99 ms: before / during / after | {latency('before')}; "
            f"{latency('during')}; {latency('after')} |",
            "",
        ]
    )


def as_json(f: FallbackFigures, context: Mapping[str, Any], samples: Sequence[Sample]) -> dict[str, Any]:
    return {**context, "figures": asdict(f), "samples": [asdict(s) for s in samples]}
