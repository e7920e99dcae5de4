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
from collections.abc import Mapping, Sequence
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


async def read_outcomes(
    results_url: str,
    ids: Sequence[str],
    timeout_s: float,
    *,
    found: dict[str, dict[str, Any]] | None = None,
    tenants: Mapping[str, str] | None = None,
    rereads: int = 1,
) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any] | None]]]:
    """Poll until every id has a terminal outcome (bounded; ids already in `found` are not read
    again); then read each found outcome `rereads` more times. Returns the outcomes (`found`, added
    to) and, per id, the later reads that differed from its first outcome. An id with a tenant in
    `tenants` is read as that tenant (open mode's ``?tenant=``)."""
    found = {} if found is None else found
    tenants = tenants or {}
    gate = asyncio.Semaphore(_READ_CONCURRENCY)
    async with httpx.AsyncClient(base_url=results_url, timeout=10.0) as client:

        async def read(rid: str) -> tuple[str, dict[str, Any] | None]:
            tenant = tenants.get(rid)
            async with gate:
                try:
                    response = await client.get(
                        f"/v1/requests/{rid}", params={"tenant": tenant} if tenant else None
                    )
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
        changed: dict[str, list[dict[str, Any] | None]] = {}
        for _ in range(rereads):
            for rid, view in await asyncio.gather(*(read(r) for r in ids if r in found)):
                if view != found[rid]:
                    changed.setdefault(rid, []).append(view)
    return found, changed


def extra_rows(db_path: Path) -> dict[str, int]:
    """Rows per request_id in the results service's SQLite file, for ids stored more than once."""
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT request_id, COUNT(*) FROM results GROUP BY request_id HAVING COUNT(*) > 1")
        return {str(rid): int(n) for rid, n in rows.fetchall()}


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
    outcomes, changed = asyncio.run(read_outcomes(results_url, accepted, timeout_s))
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
    extra = extra_rows(db_path).keys()
    return Account(
        accepted=len(accepted),
        lost=[rid for rid in accepted if rid not in outcomes],
        caller_duplicates=len(changed) + len(extra & wanted),
        absorbed=absorbed,
        statuses=dict(Counter(str(view["status"]) for view in outcomes.values())),
        completions_ms=sorted(first_completion.values()),
        by_dispatcher=dict(writers),
    )
