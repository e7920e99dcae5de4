"""One frame of `inferq top`: per tier figures computed from the scrapes, then drawn with rich.

Rates and the wait P95 are taken over the scrapes kept (the last `window` seconds): the increase of
each counter or histogram between the oldest and the newest. Gauges come from the newest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from inferq.tools.top.samples import Scrape, delta, quantile

TIERS = ("HIGH", "MEDIUM", "LOW")


@dataclass(frozen=True)
class TierRow:
    tier: str
    waiting: float | None  # backlog at ingest (group lag), else read-ahead + consumer lag
    readahead: float | None
    running: float | None
    share: float | None  # running over the effective budget
    floor: float | None
    ceiling: float | None
    wait_p95_s: float | None
    done_per_s: float | None
    accepted_per_s: float | None
    lag: float | None
    paused: float | None
    fill_ratio: float | None


@dataclass(frozen=True)
class Frame:
    rows: tuple[TierRow, ...]
    window: str | None
    budget: float | None
    effective_budget: float | None
    outcomes_per_s: dict[str, float]
    backend_per_s: dict[str, float]
    span_s: float
    sources_down: tuple[str, ...] = ()
    # Each backend's circuit, the worst any dispatcher reports: 0 closed, 1 half-open, 2 open.
    circuits: dict[str, float] = field(default_factory=dict)


def _rate(newer: Scrape, older: Scrape | None, name: str, **match: str) -> float | None:
    """Increase per second between the scrapes; None when there is no second scrape or neither has
    the metric (no service reports it: nothing to say, not zero)."""
    if older is None or newer.at <= older.at or not (newer.has(name) or older.has(name)):
        return None
    now, before = newer.total(name, **match), older.total(name, **match)
    increase = now - before if now >= before else now
    return increase / (newer.at - older.at)


def _rates_by(newer: Scrape, older: Scrape | None, name: str, label: str) -> dict[str, float]:
    if older is None or newer.at <= older.at:
        return {}
    now, before = newer.by(name, label), older.by(name, label)
    span = newer.at - older.at
    return {
        k: (v - before.get(k, 0.0) if v >= before.get(k, 0.0) else v) / span for k, v in sorted(now.items())
    }


def build_frame(scrapes: Sequence[Scrape], sources_down: Sequence[str] = ()) -> Frame:
    """The frame for `scrapes` (oldest first; each the merge of every service's page at one time)."""
    newest = scrapes[-1]
    oldest = scrapes[0] if len(scrapes) > 1 else None
    eff_values = [s.value for s in newest.select("inferq_effective_budget")]
    effective = max(eff_values) if eff_values else None
    budgets = [s.value for s in newest.select("inferq_budget")]
    windows = [s.labels.get("window", "?") for s in newest.select("inferq_schedule_window_info") if s.value]
    running = newest.peak("inferq_tokens_in_use", "tier")
    readahead = newest.by("inferq_readahead_waiting", "tier")
    lag = newest.by("inferq_consumer_lag", "tier")
    backlog = newest.peak("inferq_backlog", "tier")
    fill = newest.peak("inferq_backlog_fill_ratio", "tier")
    paused = newest.by("inferq_paused_partitions_by_tier", "tier")
    floors = newest.peak("inferq_tier_floor", "tier")
    ceilings = newest.peak("inferq_tier_ceiling", "tier")
    has_ingest = newest.has("inferq_ingest_accepted_total") or (
        oldest is not None and oldest.has("inferq_ingest_accepted_total")
    )
    rows = []
    for tier in TIERS:
        waits = newest.buckets("inferq_queue_wait_seconds", tier=tier)
        if oldest is not None:
            waits = delta(waits, oldest.buckets("inferq_queue_wait_seconds", tier=tier))
        in_use = running.get(tier)
        waiting = backlog.get(tier)
        if waiting is None and (tier in lag or tier in readahead):
            waiting = lag.get(tier, 0.0) + readahead.get(tier, 0.0)
        rows.append(
            TierRow(
                tier=tier,
                waiting=waiting,
                readahead=readahead.get(tier),
                running=in_use,
                share=in_use / effective if effective and in_use is not None else None,
                floor=floors.get(tier),
                ceiling=ceilings.get(tier),
                wait_p95_s=quantile(0.95, waits),
                done_per_s=_rate(newest, oldest, "inferq_outcomes_total", tier=tier),
                accepted_per_s=_rate(newest, oldest, "inferq_ingest_accepted_total", tier=tier)
                if has_ingest
                else None,
                lag=lag.get(tier),
                paused=paused.get(tier),
                fill_ratio=fill.get(tier),
            )
        )
    return Frame(
        rows=tuple(rows),
        window=", ".join(sorted(set(windows))) or None,
        budget=max(budgets) if budgets else None,
        effective_budget=effective,
        outcomes_per_s=_rates_by(newest, oldest, "inferq_outcomes_total", "status"),
        backend_per_s=_rates_by(newest, oldest, "inferq_backend_calls_total", "status"),
        span_s=newest.at - oldest.at if oldest is not None else 0.0,
        sources_down=tuple(sources_down),
        circuits=newest.peak("inferq_backend_circuit_state", "backend"),
    )


CIRCUIT_WORDS = {0: "closed", 1: "probing", 2: "OPEN"}


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def render(frame: Frame) -> RenderableType:
    head = Text()
    head.append("inferq top", style="bold")
    head.append(f"  window {frame.window or '-'}")
    head.append(f"  effective budget {_num(frame.effective_budget)}/{_num(frame.budget)}")
    cut = (
        frame.budget is not None
        and frame.effective_budget is not None
        and frame.effective_budget < frame.budget
    )
    if cut:
        head.append(" (cut)", style="bold yellow")
    span = f"{frame.span_s:.0f}" if frame.span_s >= 10 else f"{frame.span_s:.1f}"
    head.append(f"  rates over {span} s" if frame.span_s else "  rates: next frame")
    legend = Text(
        "waiting: backlog at ingest (else lag + ahead); ahead: read, in memory; run: calls in flight; "
        "share: of the effective budget; min/max: the window's floor and ceiling",
        style="dim",
    )

    # Fits 80 columns: short headers, no vertical rules.
    table = Table(
        expand=False,
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 0),
    )
    for name, justify in (
        ("tier", "left"),
        ("waiting", "right"),
        ("ahead", "right"),
        ("run", "right"),
        ("share", "right"),
        ("min/max", "right"),
        ("p95 wait", "right"),
        ("done/s", "right"),
        ("in/s", "right"),
        ("lag", "right"),
        ("paused", "right"),
        ("fill", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in frame.rows:
        fill_style = "red" if (row.fill_ratio or 0) > 0.7 else ""
        table.add_row(
            row.tier,
            _num(row.waiting),
            _num(row.readahead),
            _num(row.running),
            _num(row.share, "{:.0%}"),
            f"{_num(row.floor)}/{_num(row.ceiling)}",
            _seconds(row.wait_p95_s),
            _num(row.done_per_s, "{:.1f}"),
            _num(row.accepted_per_s, "{:.1f}"),
            _num(row.lag),
            _num(row.paused),
            Text(_num(row.fill_ratio, "{:.0%}"), style=fill_style),
        )
    parts: list[RenderableType] = [head, table, legend]
    if frame.outcomes_per_s:
        parts.append(
            Text("outcomes/s  " + "  ".join(f"{k} {v:.1f}" for k, v in frame.outcomes_per_s.items()))
        )
    if frame.backend_per_s:
        parts.append(Text("backend/s   " + "  ".join(f"{k} {v:.1f}" for k, v in frame.backend_per_s.items())))
    if len(frame.circuits) > 1 or any(frame.circuits.values()):
        line = Text("backends    ")
        for name, state in sorted(frame.circuits.items()):
            word = CIRCUIT_WORDS.get(int(state), "?")
            line.append(f"{name} {word}  ", style="bold red" if state else "")
        parts.append(line)
    for source in frame.sources_down:
        parts.append(Text(f"no answer from {source}", style="bold red"))
    parts.append(Text("Ctrl-C quits", style="dim"))
    return Group(*parts)
