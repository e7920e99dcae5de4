"""PNG plots of one or several runs: queue wait and backlog over time, per tier (tokens in use and
the wait percentiles are drawn by ``pictures``).

One panel per run, side by side on the same axes, the x axis in seconds since the run's first
enqueue, so runs recorded at different times line up. Figures are drawn on matplotlib's Agg canvas
directly (no pyplot, no display, no global figure state), so this works headless and from several
threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from inferq.messaging.tiers import TIERS_BY_PRIORITY, Tier
from inferq.tools.report.documents import RunDocument
from inferq.tools.report.timeseries import Step, backlog, wait_points

TIER_COLORS = {Tier.HIGH: "tab:red", Tier.MEDIUM: "tab:blue", Tier.LOW: "tab:green"}
_PANEL_HEIGHT_IN = 3.6
_PANEL_WIDTH_IN = 5.5


def _panels(count: int, title: str) -> tuple[Figure, list[Axes]]:
    """One panel per run, side by side, sharing both axes: the runs compare at a glance."""
    width = 11.0 if count == 1 else 1.0 + _PANEL_WIDTH_IN * count
    figure = Figure(figsize=(width, 0.8 + _PANEL_HEIGHT_IN), layout="constrained")
    FigureCanvasAgg(figure)
    axes = list(figure.subplots(1, count, squeeze=False, sharex=True, sharey=True)[0, :])
    figure.suptitle(title)
    return figure, axes


def _origin_ms(doc: RunDocument) -> int:
    return min((o.enqueued_ms for o in doc.outcomes), default=0)


def _step(ax: Axes, step: Step, origin_ms: int, *, color: str, label: str, linewidth: float = 1.0) -> None:
    if not step.times:
        return
    xs = [0.0, *((t - origin_ms) / 1000 for t in step.times)]
    ax.step(xs, [0, *step.values], where="post", color=color, label=label, linewidth=linewidth)


def _save(figure: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def queue_wait_plot(runs: Sequence[RunDocument], path: Path) -> Path:
    figure, axes = _panels(len(runs), "Queue wait (dispatched - enqueued) by enqueue time")
    for ax, doc in zip(axes, runs, strict=True):
        origin = _origin_ms(doc)
        for tier in TIERS_BY_PRIORITY:
            points = wait_points(doc.outcomes, tier)
            if points:
                xs = [(at - origin) / 1000 for at, _ in points]
                ax.scatter(
                    xs, [w / 1000 for _, w in points], s=5, alpha=0.5, color=TIER_COLORS[tier], label=tier
                )
        # Chat waits tenths of a second, briefs minutes: linear below 1 s, logarithmic above.
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_title(doc.name, loc="left")
        ax.set_xlabel("s since the run's first enqueue")
        ax.legend(loc="upper right", markerscale=3)
    axes[0].set_ylabel("wait s")
    return _save(figure, path)


def backlog_plot(runs: Sequence[RunDocument], path: Path) -> Path:
    figure, axes = _panels(len(runs), "Backlog (enqueued, not yet dispatched)")
    for ax, doc in zip(axes, runs, strict=True):
        origin = _origin_ms(doc)
        for tier in TIERS_BY_PRIORITY:
            _step(ax, backlog(doc.outcomes, tier), origin, color=TIER_COLORS[tier], label=tier.value)
        ax.set_title(doc.name, loc="left")
        ax.set_xlabel("s since the run's first enqueue")
        ax.legend(loc="upper right")
    axes[0].set_ylabel("requests")
    return _save(figure, path)


def write_plots(runs: Sequence[RunDocument], out: Path) -> list[Path]:
    """queue_wait.png and backlog.png (one panel per run) and, from ``pictures``, tokens_in_use.png
    and wait_percentiles.png (the runs side by side) in `out`."""
    from inferq.tools.report.pictures import tokens_area_plot, wait_percentiles_plot

    if not runs:
        raise ValueError("nothing to plot")
    return [
        queue_wait_plot(runs, out / "queue_wait.png"),
        tokens_area_plot(runs, out / "tokens_in_use.png"),
        wait_percentiles_plot(runs, out / "wait_percentiles.png"),
        backlog_plot(runs, out / "backlog.png"),
    ]
