"""What preemption cost, per tier, from the dispatchers' counters (`inferq report --metrics`).

Results do not say that a request was preempted on its way; the dispatchers count it:
`inferq_preemptions_total{tier}` (backend calls cancelled to give their slot to a higher tier),
`inferq_preempted_tokens_total{tier}` (tokens those calls had generated, then discarded), and
`inferq_preemption_limit_reached_total{tier}` (requests preempted so often that they are lent no
more slots above their tier's ceiling). Each `--metrics` source is a dispatcher's /metrics URL or a
saved page; the counters of several dispatchers add up per tier. They count since each dispatcher
started, so a run's own figures are those of dispatchers started for it (as the benchmarks do).

A page with none of the three (a dispatcher without preemption, or before it) gives no section; a
page with some shows the others as 0, as a counter not yet incremented is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from inferq.messaging.tiers import TIERS_BY_PRIORITY
from inferq.tools.report.errors import ReportError
from inferq.tools.top.samples import Scrape

PREEMPTIONS = "inferq_preemptions_total"
PREEMPTED_TOKENS = "inferq_preempted_tokens_total"
LIMIT_REACHED = "inferq_preemption_limit_reached_total"
METRICS_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TierPreemption:
    preemptions: int = 0
    discarded_tokens: int = 0
    limit_reached: int = 0


def preemption_by_tier(scrape: Scrape) -> dict[str, TierPreemption] | None:
    """Every tier's counters (a tier with none: zeros), or None when the page has none at all."""
    names = (PREEMPTIONS, PREEMPTED_TOKENS, LIMIT_REACHED)
    if not any(scrape.has(name) for name in names):
        return None
    counts = [scrape.by(name, "tier") for name in names]
    tiers = [t.value for t in TIERS_BY_PRIORITY]
    others = sorted({tier for by in counts for tier in by} - set(tiers))
    return {tier: TierPreemption(*(_count(by.get(tier, 0.0)) for by in counts)) for tier in [*tiers, *others]}


def _count(value: float) -> int:
    # A counter read back is a float; one that is not finite is a broken page, shown as 0, not a crash.
    return round(value) if math.isfinite(value) else 0


def render_preemption(by_tier: dict[str, TierPreemption]) -> str:
    """The terminal lines: one per tier, then the totals."""
    header = f"{'preemption':<12}{'preempted':>12}{'tokens discarded':>18}{'limit reached':>15}"
    lines = [header, "-" * len(header)]
    for tier, row in by_tier.items():
        lines.append(f"{tier:<12}{row.preemptions:>12,}{row.discarded_tokens:>18,}{row.limit_reached:>15,}")
    total = TierPreemption(
        sum(r.preemptions for r in by_tier.values()),
        sum(r.discarded_tokens for r in by_tier.values()),
        sum(r.limit_reached for r in by_tier.values()),
    )
    lines.append(
        f"{'all':<12}{total.preemptions:>12,}{total.discarded_tokens:>18,}{total.limit_reached:>15,}"
    )
    return "\n".join(lines)


def read_pages(sources: Sequence[str]) -> Scrape:
    """The pages of `sources` (http(s) URLs of /metrics, or files) as one scrape."""
    merged = Scrape(0.0)
    with httpx.Client(timeout=METRICS_TIMEOUT_S) as client:
        for source in sources:
            is_url = source.startswith(("http://", "https://"))
            try:
                if is_url:
                    response = client.get(source)
                    response.raise_for_status()
                    text = response.text
                else:
                    text = Path(source).read_text(encoding="utf-8")
                merged = merged.merged(Scrape.parse(text, 0.0))
            except (OSError, httpx.HTTPError, ValueError) as exc:
                # A URL is named without its user and password: an error must not show a secret.
                shown = str(httpx.URL(source).copy_with(username=None, password=None)) if is_url else source
                raise ReportError(f"metrics of {shown} could not be read ({type(exc).__name__})") from exc
    return merged
