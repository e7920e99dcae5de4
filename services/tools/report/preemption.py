"""What preemption cost, per tier, from the dispatchers' counters.

Results do not say that a request was preempted on its way; the dispatchers count it:
`inferq_preemptions_total{tier}` (backend calls cancelled to give their slot to a higher tier),
`inferq_preempted_tokens_total{tier}` (tokens those calls had generated, then discarded), and
`inferq_preemption_limit_reached_total{tier}` (requests preempted so often that they are lent no
more slots above their tier's ceiling). Read two ways:

- `--metrics`: each source is a dispatcher's /metrics URL or a saved page; the counters of several
  dispatchers add up per tier. They count since each dispatcher started, so a run's own figures are
  those of dispatchers started for it (as the benchmarks do).
- `--prometheus`: each run's own increase over its span (first enqueue to last outcome), summed
  over dispatchers, kept in the run document (`params["preemption"]`, tier: [preempted, tokens
  discarded, limit reached]) as the effective budget is, so a later `--compare` shows it too.

Pages (or a Prometheus) with none of the three (dispatchers without preemption, or from before it)
give no section; with some, a counter a tier lacks shows 0, as a counter not yet incremented is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from inferq.messaging.tiers import TIERS_BY_PRIORITY
from inferq.redaction import redacted_url
from inferq.tools.report.documents import RunDocument
from inferq.tools.report.errors import ReportError
from inferq.tools.report.prometheus import attach_per_run, result_series
from inferq.tools.top.samples import Scrape

PREEMPTIONS = "inferq_preemptions_total"
PREEMPTED_TOKENS = "inferq_preempted_tokens_total"
LIMIT_REACHED = "inferq_preemption_limit_reached_total"
NAMES = (PREEMPTIONS, PREEMPTED_TOKENS, LIMIT_REACHED)  # in TierPreemption's field order
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TierPreemption:
    preemptions: int = 0
    discarded_tokens: int = 0
    limit_reached: int = 0

    def as_list(self) -> list[int]:
        return [self.preemptions, self.discarded_tokens, self.limit_reached]


def _rows(counts: Sequence[Mapping[str, float]]) -> dict[str, TierPreemption]:
    """`counts` (one tier -> value map per name of NAMES) as rows: the tiers by priority, then any
    other tier named; a counter a tier lacks is 0."""
    tiers = [t.value for t in TIERS_BY_PRIORITY]
    others = sorted({tier for by in counts for tier in by} - set(tiers))
    return {tier: TierPreemption(*(_count(by.get(tier, 0.0)) for by in counts)) for tier in [*tiers, *others]}


def _count(value: float) -> int:
    # A counter read back is a float; one that is not finite is a broken page, shown as 0, not a crash.
    return round(value) if math.isfinite(value) else 0


def preemption_by_tier(scrape: Scrape) -> dict[str, TierPreemption] | None:
    """Every tier's counters on the pages, or None when they have none of the three."""
    if not any(scrape.has(name) for name in NAMES):
        return None
    return _rows([scrape.by(name, "tier") for name in NAMES])


def render_preemption(by_tier: Mapping[str, TierPreemption]) -> str:
    """The terminal lines: one per tier, then the totals."""

    def line(label: str, row: TierPreemption) -> str:
        return f"{label:<12}{row.preemptions:>12,}{row.discarded_tokens:>18,}{row.limit_reached:>15,}"

    header = f"{'preemption':<12}{'preempted':>12}{'tokens discarded':>18}{'limit reached':>15}"
    total = TierPreemption(
        *(sum(column) for column in zip(*(r.as_list() for r in by_tier.values()), strict=True))
    )
    return "\n".join(
        [header, "-" * len(header), *(line(t, r) for t, r in by_tier.items()), line("all", total)]
    )


def read_pages(sources: Sequence[str]) -> Scrape:
    """The pages of `sources` (http(s) URLs of /metrics, or files) as one scrape."""
    merged = Scrape(0.0)
    with httpx.Client(timeout=TIMEOUT_S) as client:
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
                shown = redacted_url(source) if is_url else source
                raise ReportError(f"metrics of {shown} could not be read ({type(exc).__name__})") from exc
    return merged


def query_preemption(
    url: str, start_ms: int, end_ms: int, *, client: httpx.Client
) -> dict[str, TierPreemption] | None:
    """Each counter's increase by tier over [start_ms, end_ms], from Prometheus; None when it has
    none of the three then."""
    span_s = max(1, math.ceil((end_ms - start_ms) / 1000))
    counts: list[dict[str, float]] = []
    for name in NAMES:
        response = client.get(
            f"{url.rstrip('/')}/api/v1/query",
            params={"query": f"sum by (tier) (increase({name}[{span_s}s]))", "time": f"{end_ms / 1000:.3f}"},
        )
        series = result_series(response)
        counts.append(
            {str(s["metric"]["tier"]): float(s["value"][1]) for s in series if "tier" in s["metric"]}
        )
    return _rows(counts) if any(counts) else None


def attach_preemption(runs: Sequence[RunDocument], prometheus_url: str | None) -> list[str]:
    """Fill each run's preemption figures from Prometheus; returns notes for the user. A run it has
    no counters for is left as it was, without a note: its dispatchers did not preempt."""
    return attach_per_run(
        runs,
        prometheus_url,
        key="preemption",
        what="preemption",
        query=lambda url, start, end, client: query_preemption(url, start, end, client=client),
        kept=lambda by_tier: {tier: row.as_list() for tier, row in by_tier.items()},
    )


def preemption_of(params: Mapping[str, object]) -> dict[str, TierPreemption] | None:
    """A run document's preemption figures (`attach_preemption`); None when it has none, or they
    are not three whole numbers a tier (a document edited by hand)."""
    kept = params.get("preemption")
    if not isinstance(kept, dict):
        return None
    rows: dict[str, TierPreemption] = {}
    for tier, values in kept.items():
        if not (isinstance(values, list) and len(values) == len(NAMES)):
            return None
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            return None
        rows[str(tier)] = TierPreemption(*values)
    return rows
