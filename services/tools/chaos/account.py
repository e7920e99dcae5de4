"""What callers can see after the fault: every accepted request's outcome, read from the results
API (twice: an outcome that changed between reads is a second outcome to its caller) and the
results store's rows; the results topic says how many duplicate outcome records the store absorbed
and when each request completed."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.demo.workload import TERMINAL
from inferq.tools.report.results_source import read_results

_READ_CONCURRENCY = 16
_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class Account:
    accepted: int
    lost: list[str]  # accepted, no terminal outcome within the bound
    caller_duplicates: int  # outcome changed between reads, or stored in more than one row
    absorbed: int  # extra outcome records of accepted requests on the results topic
    statuses: dict[str, int]
    completions_ms: list[int]  # completed_at_ms of each accepted request's first outcome record
    by_dispatcher: dict[str, int]


async def _read_outcomes(
    results_url: str, ids: Sequence[str], timeout_s: float
) -> tuple[dict[str, dict[str, Any]], int]:
    """Poll until every id has a terminal outcome (bounded); then read each once more and count the
    ids whose outcome differs."""
    found: dict[str, dict[str, Any]] = {}
    gate = asyncio.Semaphore(_READ_CONCURRENCY)
    async with httpx.AsyncClient(base_url=results_url, timeout=10.0) as client:

        async def read(rid: str) -> tuple[str, dict[str, Any] | None]:
            async with gate:
                try:
                    response = await client.get(f"/v1/requests/{rid}")
                except httpx.HTTPError:
                    return rid, None
            if response.status_code == 200 and response.json().get("status") in TERMINAL:
                view: dict[str, Any] = response.json()
                return rid, view
            return rid, None

        deadline = time.monotonic() + timeout_s
        while True:
            pending = [rid for rid in ids if rid not in found]
            for rid, view in await asyncio.gather(*(read(r) for r in pending)):
                if view is not None:
                    found[rid] = view
            if not pending or time.monotonic() >= deadline:
                break
            await asyncio.sleep(_POLL_S)
        again = await asyncio.gather(*(read(r) for r in found))
    changed = sum(1 for rid, view in again if view != found[rid])
    return found, changed


def _extra_rows(db_path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT request_id FROM results GROUP BY request_id HAVING COUNT(*) > 1")
        return {str(rid) for (rid,) in rows.fetchall()}


def account(
    *,
    results_url: str,
    kafka: KafkaSettings,
    run_id: str,
    db_path: Path,
    accepted: Sequence[str],
    timeout_s: float,
) -> Account:
    """`accepted`: the run's request ids (``<run_id>:...``) ingest answered 202."""
    outcomes, changed = asyncio.run(_read_outcomes(results_url, accepted, timeout_s))
    wanted = set(accepted)
    read = read_results(kafka, [run_id])
    first_completion: dict[str, int] = {}
    writers: Counter[str] = Counter()
    for result in read.by_run[run_id]:
        if result.request_id in wanted:
            first_completion[result.request_id] = result.completed_at_ms
            writers[result.dispatcher_id] += 1
    # The run's ids only are on its topic: every duplicate the reader dropped is one of its requests'.
    absorbed = read.duplicates
    extra = _extra_rows(db_path)
    return Account(
        accepted=len(accepted),
        lost=[rid for rid in accepted if rid not in outcomes],
        caller_duplicates=changed + len(extra & wanted),
        absorbed=absorbed,
        statuses=dict(Counter(str(view["status"]) for view in outcomes.values())),
        completions_ms=sorted(first_completion.values()),
        by_dispatcher=dict(writers),
    )
