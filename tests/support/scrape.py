"""A service's /metrics page read as a test needs it: the sum of one metric's series."""

from __future__ import annotations

import httpx


def metric_sum(page_url: str, name: str) -> float:
    """The sum over its label sets of metric `name` (a counter or a gauge) on the Prometheus text
    page `page_url` (a service's ``.../metrics``); 0 when it has no series yet."""
    text = httpx.get(page_url, timeout=10.0).text
    lines = [line for line in text.splitlines() if line.startswith((f"{name}{{", f"{name} "))]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)
