"""Figures of each run read back from a Prometheus that scraped its dispatchers (`--prometheus`).

The dispatchers' counters and gauges say what the results cannot (the effective budget, what
preemption cost). `attach_per_run` asks Prometheus once per run, over the run's span (first enqueue
to last outcome), and keeps the answer in the run document (`params[key]`) so a report's JSON
carries it to a later `--compare`. A Prometheus that does not answer leaves the run as it was and
says so in a note; a run already holding the figures is not asked again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import httpx

from inferq.tools.report.documents import RunDocument

T = TypeVar("T")
QUERY_TIMEOUT_S = 10.0
# What a Prometheus that answers wrongly raises on the way (a refused query, a body of another shape).
_UNANSWERED = (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError)


def result_series(response: httpx.Response) -> list[dict[str, Any]]:
    """The series of a query's answer (an error status raises; an unsuccessful query has none)."""
    response.raise_for_status()
    body = response.json()
    return list(body.get("data", {}).get("result", [])) if body.get("status") == "success" else []


def attach_per_run(
    runs: Sequence[RunDocument],
    prometheus_url: str | None,
    *,
    key: str,
    what: str,
    query: Callable[[str, int, int, httpx.Client], T | None],
    kept: Callable[[T], object],
    absent: str | None = None,
) -> list[str]:
    """`params[key] = kept(query(url, start_ms, end_ms, client))` for each run with outcomes and
    without it; returns notes for the user, named by `what`. A query that finds nothing leaves the
    run as it was, with the note `absent` when given."""
    if prometheus_url is None:
        return []
    notes: list[str] = []
    with httpx.Client(timeout=QUERY_TIMEOUT_S) as client:
        for doc in runs:
            if not doc.outcomes or key in doc.params:
                continue
            start = min(o.enqueued_ms for o in doc.outcomes)
            end = max(o.completed_ms for o in doc.outcomes)
            try:
                found = query(prometheus_url, start, end, client)
            except _UNANSWERED as exc:
                notes.append(f"{what} of {doc.name}: Prometheus did not answer ({type(exc).__name__})")
                continue
            if found is None:
                if absent is not None:
                    notes.append(f"{what} of {doc.name}: {absent}")
                continue
            doc.params[key] = kept(found)
    return notes
