"""The report's at-a-glance pictures: tokens in use as a stacked area by tier, binned, with the
budget and the effective budget as lines; and the queue-wait P50/P95/P99 of each tier over time.

Several runs (`--compare`) are drawn side by side in one figure, one column per run, on the same
axes: the same time span (seconds since each run's first enqueue) and the same scale, so the eye
compares heights directly. Drawn on matplotlib's Agg canvas (no pyplot, no display), as `plots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from inferq.messaging.tiers import TIERS_BY_PRIORITY
from inferq.tools.report.binned import (
    QUANTILES,
    Bins,
    auto_width_ms,
    effective_budget_of,
    tokens_by_tier,
    wait_quantiles,
)
from inferq.tools.report.documents import RunDocument
from inferq.tools.report.plots import TIER_COLORS

# At most this many bins of tokens in use per run (1 s each up to half an hour of run).
MAX_TOKEN_BINS = 2_000
WAIT_BINS = 60
QUANTILE_STYLES = {50: ("-", 1.0), 95: ("--", 1.4), 99: (":", 1.4)}


def _origin_ms(doc: RunDocument) -> int:
    return min((o.enqueued_ms for o in doc.outcomes), default=0)


def _span_s(doc: RunDocument) -> float:
    if not doc.outcomes:
        return 0.0
    return (max(o.completed_ms for o in doc.outcomes) - _origin_ms(doc)) / 1000


def _side_by_side(rows: int, runs: int, title: str, row_height_in: float) -> tuple[Figure, list[list[Axes]]]:
    figure = Figure(figsize=(1.0 + 5.5 * runs, 0.9 + row_height_in * rows), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(rows, runs, squeeze=False, sharex=True, sharey="row")
    figure.suptitle(title)
    return figure, [list(row) for row in grid]


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def tokens_area_plot(runs: Sequence[RunDocument], path: Path) -> Path:
    """tokens_in_use.png: per run, the mean tokens in use per bin stacked by tier (HIGH at the
    bottom), the budget dashed and the effective budget (when the run has it) as a step line."""
    width_ms = max(auto_width_ms(doc.outcomes, target_bins=MAX_TOKEN_BINS) for doc in runs)
    figure, grid = _side_by_side(
        1,
        len(runs),
        f"Tokens in use by tier (mean per {width_ms // 1000} s), budget and effective budget",
        3.6,
    )
    top = 1.0
    for ax, doc in zip(grid[0], runs, strict=True):
        bins = Bins.covering(doc.outcomes, width_ms, _origin_ms(doc))
        per_tier = tokens_by_tier(doc.outcomes, bins)
        if bins.count:
            xs = [*bins.starts_s(), bins.count * width_ms / 1000]
            stacks = [[*per_tier[t], per_tier[t][-1]] for t in TIERS_BY_PRIORITY]
            ax.stackplot(
                xs,
                *stacks,
                labels=[t.value for t in TIERS_BY_PRIORITY],
                colors=[TIER_COLORS[t] for t in TIERS_BY_PRIORITY],
                alpha=0.6,
                step="post",
            )
            top = max(top, max(sum(level) for level in zip(*stacks, strict=True)))
        ax.axhline(doc.budget, color="black", linestyle="--", linewidth=1.0, label=f"budget {doc.budget}")
        top = max(top, doc.budget)
        effective = effective_budget_of(doc.params)
        if effective is not None:
            origin = _origin_ms(doc)
            xs_eff = [(t - origin) / 1000 for t in effective.times_ms]
            ax.step(
                xs_eff, effective.values, where="post", color="tab:purple", linewidth=1.6, label="effective"
            )
            top = max(top, max(effective.values))
        else:
            ax.text(
                0.01,
                0.97,
                "effective budget not recorded",
                transform=ax.transAxes,
                fontsize=8,
                va="top",
                alpha=0.7,
            )
        ax.set_title(doc.name, loc="left")
        ax.legend(loc="upper right", fontsize=8)
        ax.set_xlabel("s since the run's first enqueue")
    grid[0][0].set_ylabel("tokens (calls in flight)")
    grid[0][0].set_ylim(0, top * 1.15)
    grid[0][0].set_xlim(0, max((_span_s(doc) for doc in runs), default=1.0) or 1.0)
    return _save(figure, path)


def wait_percentiles_plot(runs: Sequence[RunDocument], path: Path) -> Path:
    """wait_percentiles.png: one row per tier, one column per run; P50/P95/P99 of the queue waits
    of the requests dispatched in each bin."""
    width_ms = max(auto_width_ms(doc.outcomes, target_bins=WAIT_BINS) for doc in runs)
    figure, grid = _side_by_side(
        len(TIERS_BY_PRIORITY),
        len(runs),
        f"Queue wait P50 / P95 / P99 by tier (requests dispatched in each {width_ms // 1000} s)",
        2.4,
    )
    tops = dict.fromkeys(TIERS_BY_PRIORITY, 0.0)
    for col, doc in enumerate(runs):
        bins = Bins.covering(doc.outcomes, width_ms, _origin_ms(doc))
        for row, tier in enumerate(TIERS_BY_PRIORITY):
            ax = grid[row][col]
            by_quantile = wait_quantiles(doc.outcomes, tier, bins)
            tops[tier] = max([tops[tier], *(v for v in by_quantile[max(QUANTILES)] if v is not None)])
            drawn = False
            for q in QUANTILES:
                points = [
                    (x, v) for x, v in zip(bins.centers_s(), by_quantile[q], strict=True) if v is not None
                ]
                if points:
                    style, width = QUANTILE_STYLES[q]
                    ax.plot(
                        [x for x, _ in points],
                        [v for _, v in points],
                        style,
                        marker=".",
                        markersize=3,
                        linewidth=width,
                        color=TIER_COLORS[tier],
                        label=f"P{q}",
                    )
                    drawn = True
            if drawn:
                ax.legend(loc="upper right", fontsize=8)
            else:
                ax.text(0.5, 0.5, "no request dispatched", transform=ax.transAxes, ha="center", alpha=0.6)
            # Chat waits tenths of a second, briefs minutes: linear below 1 s, logarithmic above.
            ax.set_yscale("symlog", linthresh=1.0)
            if row == 0:
                ax.set_title(doc.name, loc="left")
            if col == 0:
                ax.set_ylabel(f"{tier.value} wait s")
            if row == len(TIERS_BY_PRIORITY) - 1:
                ax.set_xlabel("s since the run's first enqueue")
    for row, tier in enumerate(TIERS_BY_PRIORITY):
        # The same scale across the runs of a tier, from 0 to above its largest P99.
        grid[row][0].set_ylim(0, max(1.0, tops[tier] * 1.5))
        grid[row][0].yaxis.set_major_formatter(ScalarFormatter())
    grid[0][0].set_xlim(0, max((_span_s(doc) for doc in runs), default=1.0) or 1.0)
    return _save(figure, path)
