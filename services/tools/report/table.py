"""The terminal table: one row per tier and measure, one column group per run (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from inferq.messaging.tiers import TIERS_BY_PRIORITY
from inferq.tools.measures import Stats
from inferq.tools.report.stats import Summary, TierSummary

_NUM_WIDTH = 8
_LABEL_WIDTH = 26
_ABBREVIATIONS = {"EXPIRED": "EXP", "EVICTED": "EVIC", "REJECTED": "REJ", "FAILED": "FAIL"}

# A cell is either the four numbers of a distribution or one text spanning the group.
Cell = tuple[str, str, str, str] | str


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _dist(s: Stats | None) -> Cell:
    if s is None:
        return "-"
    return (number(s.mean), number(s.p50), number(s.p95), number(s.p99))


def _statuses(row: TierSummary) -> str:
    parts = [f"{_ABBREVIATIONS.get(s, s)} {n}" for s, n in row.by_status.items()]
    return " ".join(parts) if parts else "none"


def _requests(row: TierSummary) -> str:
    r = row.requests
    return "-" if r is None else f"sent {r.submitted} acc {r.accepted} miss {r.missing}"


def _rows(summaries: Sequence[Summary]) -> list[tuple[str, list[Cell]]]:
    rows: list[tuple[str, list[Cell]]] = []
    with_requests = any(row.requests is not None for s in summaries for row in s.tiers)
    for tier in TIERS_BY_PRIORITY:
        per_run = [s.tier(tier) for s in summaries]
        if with_requests:
            rows.append((f"{tier.value} requests", [_requests(r) for r in per_run]))
        rows.append((f"{tier.value} outcomes", [_statuses(r) for r in per_run]))
        rows.append((f"{tier.value} queue wait s", [_dist(r.queue_wait_s) for r in per_run]))
        rows.append((f"{tier.value} end to end s", [_dist(r.end_to_end_s) for r in per_run]))
        rows.append((f"{tier.value} OK per s", [number(r.throughput_per_s) for r in per_run]))
    rows.append(("LOW makespan s", [number(s.low_makespan_s) for s in summaries]))
    rows.append(("budget used, whole run", [percent(s.utilization.over_run) for s in summaries]))
    rows.append(("budget used, work waiting", [percent(s.utilization.while_waiting) for s in summaries]))
    rows.append(("max in flight / budget", [f"{s.max_in_flight} / {s.budget}" for s in summaries]))
    rows.append(("run span s", [number(s.span_s) for s in summaries]))
    return rows


def render(runs: Sequence[tuple[str, Summary]]) -> str:
    """The table for `runs` (name, summary), side by side in the given order."""
    names = [name for name, _ in runs]
    rows = _rows([summary for _, summary in runs])
    widths = [
        max(4 * _NUM_WIDTH, len(name), *(len(cells[i]) for _, cells in rows if isinstance(cells[i], str)))
        for i, name in enumerate(names)
    ]

    def line(label: str, cells: Sequence[Cell]) -> str:
        out = [f"{label:<{_LABEL_WIDTH}}"]
        for width, cell in zip(widths, cells, strict=True):
            text = cell if isinstance(cell, str) else "".join(f"{v:>{_NUM_WIDTH}}" for v in cell)
            out.append(f"{text:<{width}}")
        return "  ".join(out).rstrip()

    header = [line("", names), line("", [("mean", "p50", "p95", "p99")] * len(names))]
    rule = "-" * len(max(header, key=len))
    return "\n".join([*header, rule, *(line(label, cells) for label, cells in rows)])
