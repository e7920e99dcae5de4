"""Replaying the trace over HTTP ingest at its times, and watching the dispatcher while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping

import httpx

from inferq.tools.bench.summary import Submission
from inferq.tools.loadtest.senders import http_body
from inferq.tools.traces.arrival import Arrival

# Enough connections that a burst does not queue behind itself for long; few enough for 2 cores.
MAX_CONNECTIONS = 64
HTTP_TIMEOUT_S = 15.0
HEALTH_INTERVAL_S = 0.25


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


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
    replaying parts of one trace share the same start).

    Every request carries its own `request_id` (`<tag>-<index>`), so its result can be found on the
    reply topic. A 429 or 503 is recorded as the run's outcome; only a missing answer is an error.
    With `keys` (tenant -> API key), each request is sent with its tenant's key; without, the
    pipeline is in open mode and the body's `tenant` names it.
    """
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
    # Requests beyond the connections wait here, not in httpcore's pool: the pool scans every queued
    # request on each change, so once the client falls behind a flood (thousands queued) its CPU
    # grows with the square of the queue and it never catches up.
    slots = asyncio.Semaphore(MAX_CONNECTIONS)
    async with httpx.AsyncClient(base_url=ingest_url, timeout=HTTP_TIMEOUT_S, limits=limits) as client:
        start_wall_ms = int(start_wall_s * 1000)

        async def one(arrival: Arrival) -> Submission:
            await asyncio.sleep(max(0.0, start_wall_s + arrival.offset_ms / 1000 - time.time()))
            request_id = f"{tag}-{arrival.index:05d}"
            body = http_body(arrival, request_id)  # the body `inferq loadgen` sends
            headers = {"authorization": f"Bearer {keys[arrival.tenant]}"} if keys else None
            status: int | None = None
            error: str | None = None
            async with slots:
                sent = wall_ms()
                try:
                    response = await client.post("/v1/requests", json=body, headers=headers)
                    status = response.status_code
                    if status != 202:
                        error = response.text[:200]
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                answered = wall_ms()
            return Submission(
                index=arrival.index,
                request_id=request_id,
                scenario=arrival.scenario,
                kind=arrival.kind,
                tier=arrival.tier,
                due_ms=start_wall_ms + arrival.offset_ms,
                sent_ms=sent,
                answered_ms=answered,
                status=status,
                error=error,
                tenant=arrival.tenant,
            )

        return list(await asyncio.gather(*(one(a) for a in trace)))


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
