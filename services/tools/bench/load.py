"""Posting a trace to HTTP ingest at its times (`inferq loadgen`'s pacer and sender), and watching
the dispatcher while it runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import httpx

from inferq.clock import wall_ms
from inferq.messaging.tiers import Tier
from inferq.tools.bench.summary import Submission
from inferq.tools.loadtest.loadgen import LoadOptions, run_load
from inferq.tools.loadtest.runs import RequestRecord
from inferq.tools.loadtest.senders import HttpSender
from inferq.tools.traces.arrival import Arrival

# Enough connections that a burst does not queue behind itself for long; few enough for 2 cores.
MAX_CONNECTIONS = 64
HTTP_TIMEOUT_S = 15.0
HEALTH_INTERVAL_S = 0.25


def submit_in_process(
    ingest_url: str,
    trace: list[Arrival],
    tag: str,
    start_wall_s: float,
    keys: Mapping[str, str] | None = None,
) -> list[Submission]:
    """`submit_trace` in a process of its own (the entry point of a child process)."""
    return asyncio.run(submit_trace(ingest_url, trace, tag, start_wall_s, keys))


async def submit_trace(
    ingest_url: str,
    trace: list[Arrival],
    tag: str,
    start_wall_s: float,
    keys: Mapping[str, str] | None = None,
) -> list[Submission]:
    """POST every arrival at its time after `start_wall_s` (epoch seconds, so that two processes
    posting parts of one trace share the same start).

    Every request carries its own `request_id` (`<tag>:<index>`), so its result can be found on the
    reply topic. A 429 or 503 is recorded as the run's outcome; only a missing answer is an error.
    With `keys` (tenant -> API key), each request is sent with its tenant's key; without, the
    pipeline is in open mode and the body's `tenant` names it.
    """
    records: list[RequestRecord] = []
    options = LoadOptions(run_id=tag, max_in_flight=MAX_CONNECTIONS, start_at_s=start_wall_s)
    sender = HttpSender(ingest_url, max_connections=MAX_CONNECTIONS, timeout_s=HTTP_TIMEOUT_S, keys=keys)
    async with sender:
        await run_load(trace, sender, options, stop=asyncio.Event(), on_record=records.append)
    return [
        Submission(
            index=r.n,
            request_id=r.request_id,
            scenario=r.scenario,
            kind=r.kind,
            tier=Tier(r.tier),
            due_ms=r.due_ms,
            sent_ms=r.sent_ms,
            answered_ms=r.answered_ms,
            status=r.status,
            error=r.error,
            tenant=r.tenant or "",
        )
        for r in records
    ]


async def sample_health(dispatcher_url: str, samples: list[tuple[int, int]], stop: asyncio.Event) -> None:
    """Record (epoch ms, effective budget) whenever the dispatcher's adaptive budget changes."""
    async with httpx.AsyncClient(base_url=dispatcher_url, timeout=2.0) as client:
        while not stop.is_set():
            try:
                health = (await client.get("/healthz")).json()
                budget = int(health["effective_budget"])
                if not samples or samples[-1][1] != budget:
                    samples.append((wall_ms(), budget))
            except (httpx.HTTPError, ValueError, KeyError):
                pass  # a missed sample is not worth stopping the run for; the next one comes soon
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=HEALTH_INTERVAL_S)
