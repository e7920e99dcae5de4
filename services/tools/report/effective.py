"""The effective budget over a run, read from Prometheus (`inferq report --prometheus URL`).

Results do not say what the adaptive controller did; the dispatchers' `inferq_effective_budget`
does, and a Prometheus that scraped them during the run has it. `attach_effective_budget` asks it
for `max(inferq_effective_budget)` over each run's span and keeps the answer in the run document
(`params["effective_budget"]`, [[t_ms, value], ...]; ``prometheus.py``). A Prometheus that does not
answer, or has nothing for a run, leaves the run as it was and says so: the plots then note that the
effective budget was not recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import httpx

from inferq.tools.report.binned import BudgetSteps
from inferq.tools.report.documents import RunDocument
from inferq.tools.report.prometheus import attach_per_run, result_series

QUERY = "max(inferq_effective_budget)"
MAX_POINTS = 10_000  # Prometheus refuses a range query of more than 11,000 points


def query_range(url: str, start_ms: int, end_ms: int, *, client: httpx.Client) -> BudgetSteps | None:
    step_s = max(1, math.ceil((end_ms - start_ms) / 1000 / MAX_POINTS))
    response = client.get(
        f"{url.rstrip('/')}/api/v1/query_range",
        params={
            "query": QUERY,
            "start": f"{start_ms / 1000:.3f}",
            "end": f"{end_ms / 1000:.3f}",
            "step": f"{step_s}s",
        },
    )
    series = result_series(response)
    if not series:
        return None
    return BudgetSteps.from_pairs([float(t) * 1000, float(v)] for t, v in series[0]["values"])


def attach_effective_budget(runs: Sequence[RunDocument], prometheus_url: str | None) -> list[str]:
    """Fill each run's effective budget from Prometheus; returns notes for the user."""
    return attach_per_run(
        runs,
        prometheus_url,
        key="effective_budget",
        what="effective budget",
        query=lambda url, start, end, client: query_range(url, start, end, client=client),
        kept=BudgetSteps.as_pairs,
        absent="no inferq_effective_budget in Prometheus then",
    )
