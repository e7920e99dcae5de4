"""`inferq bench tokens`'s figures, from the results of each run: pure, so a unit test checks them.

Per run: tokens per minute achieved against the limit (the usage of the calls dispatched in the
measured minutes, over those minutes), the simulator's 429s for calls past the minute (over-dispatch:
target 0), and the waits from acceptance to dispatch per tier (HIGH's beside FIFO's in the same run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from inferq.messaging.records import InferenceResult
from inferq.messaging.tiers import Tier
from inferq.tools.bench.machine import Column, cell, columns_table, figure, table
from inferq.tools.measures import percentile as measured_percentile

TPM_TARGET = 0.95
MINUTE_MS = 60_000


@dataclass(frozen=True)
class TokensRow:
    policy: str
    tpm_limit: int
    minutes: float
    tokens_per_minute: float
    share_of_limit: float
    over_dispatch_429: int
    answered_ok: int
    high_wait_p50_s: float | None
    high_wait_p99_s: float | None
    low_wait_p50_s: float | None


def percentile(values: Sequence[float], q: float) -> float | None:
    """`measures.percentile`, None for no values."""
    return measured_percentile(values, q) if values else None


def row(
    policy: str, tpm_limit: int, minutes: float, results: Sequence[InferenceResult], rate_limited: int
) -> TokensRow:
    """One run's row: tokens of the calls dispatched within `minutes` of the first dispatch."""
    dispatched = [r for r in results if r.dispatched_at_ms is not None]
    start = min((r.dispatched_at_ms for r in dispatched if r.dispatched_at_ms is not None), default=0)
    end = start + minutes * MINUTE_MS
    tokens = sum(
        r.usage.total_tokens
        for r in dispatched
        if r.usage is not None and r.dispatched_at_ms is not None and r.dispatched_at_ms < end
    )
    per_minute = tokens / minutes if minutes > 0 else 0.0

    def waits(tier: Tier) -> list[float]:
        return [
            (r.dispatched_at_ms - r.enqueued_at_ms) / 1000
            for r in dispatched
            if r.tier is tier and r.dispatched_at_ms is not None
        ]

    return TokensRow(
        policy=policy,
        tpm_limit=tpm_limit,
        minutes=minutes,
        tokens_per_minute=round(per_minute, 1),
        share_of_limit=round(per_minute / tpm_limit, 4) if tpm_limit else 0.0,
        over_dispatch_429=rate_limited,
        answered_ok=sum(1 for r in results if r.status.value == "OK"),
        high_wait_p50_s=percentile(waits(Tier.HIGH), 50),
        high_wait_p99_s=percentile(waits(Tier.HIGH), 99),
        low_wait_p50_s=percentile(waits(Tier.LOW), 50),
    )


def verdicts(rows: Mapping[str, TokensRow]) -> dict[str, bool | None]:
    """The targets: inferq at >= 95% of the limit, no over-dispatch 429 in any run, and HIGH's p99
    wait under inferq no longer than under FIFO (None: a run missing)."""
    inferq, fifo = rows.get("inferq"), rows.get("fifo")
    high_first: bool | None = None
    inferq_p99 = inferq.high_wait_p99_s if inferq is not None else None
    fifo_p99 = fifo.high_wait_p99_s if fifo is not None else None
    if inferq_p99 is not None and fifo_p99 is not None:
        high_first = inferq_p99 <= fifo_p99
    return {
        "tokens_per_minute_at_least_95_percent": None
        if inferq is None
        else inferq.share_of_limit >= TPM_TARGET,
        "no_429_from_over_dispatch": all(r.over_dispatch_429 == 0 for r in rows.values()),
        "high_waits_no_longer_than_fifo": high_first,
    }


COLUMNS: list[Column] = [
    ("policy", lambda r: r.policy),
    ("TPM limit", lambda r: r.tpm_limit),
    ("TPM achieved", figure("tokens_per_minute", ".0f")),
    ("share", figure("share_of_limit", ".1%")),
    ("429 over-dispatch", lambda r: r.over_dispatch_429),
    ("OK", lambda r: r.answered_ok),
    (
        "HIGH wait p50 / p99 s",
        lambda r: f"{cell(r.high_wait_p50_s, '.2f')} / {cell(r.high_wait_p99_s, '.2f')}",
    ),
    ("LOW wait p50 s", figure("low_wait_p50_s", ".2f")),
]


def markdown(rows: Mapping[str, TokensRow], header: str) -> str:
    met = {None: "-", True: "met", False: "missed"}
    targets = [(name.replace("_", " "), met[ok]) for name, ok in verdicts(rows).items()]
    title = "# Token budget: tokens per minute against the simulator's limit"
    runs = columns_table(COLUMNS, rows.values())
    return "\n".join([title, "", header, "", runs, "", *table("target | verdict", targets)]) + "\n"


def as_json(rows: Mapping[str, TokensRow], extra: Mapping[str, object]) -> dict[str, object]:
    return {**extra, "runs": {name: asdict(r) for name, r in rows.items()}, "verdicts": verdicts(rows)}
