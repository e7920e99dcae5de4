"""One trace through the real pipeline: fresh topics and processes, the trace posted to ingest at its
times, every accepted request's outcome read from the reply topic. What the scheduling and fairness
benches share; each turns the `PipelineRun` into its own figures.

Every run gets a fresh topic prefix (no leftover backlog) and fresh processes (simulated backend with
limit B, results, one dispatcher, ingest). Part of the trace (a batch dump, a flooding tenant) is
posted by a process of its own, as a separate producer would be: posting hundreds of requests at once
from one event loop delays the arrivals due at the same moment (measured: 0.7 s late, then sent as
one artificial burst). The trace is posted at its times with `inferq loadgen`'s pacer and sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import httpx

from inferq.clock import wall_ms
from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceResult
from inferq.messaging.tiers import Tier
from inferq.tools.bench.kafka import ResultCollector
from inferq.tools.bench.summary import Submission
from inferq.tools.broker.broker import pick_free_ports
from inferq.tools.loadtest.loadgen import LoadOptions, run_load
from inferq.tools.loadtest.runs import RequestRecord
from inferq.tools.loadtest.senders import HttpSender
from inferq.tools.stack.pipeline import Pipeline, PipelinePorts
from inferq.tools.top.samples import Scrape
from inferq.tools.traces.arrival import Arrival

T = TypeVar("T")
CHILD_START_LEAD_S = 3.0  # a spawned Python child takes about a second to import httpx on 2 cores
CHILD_TIMEOUT_S = 120.0  # bound of the child's posting beyond the trace's own duration


# -- posting the trace to ingest, watching the dispatcher ----------------------------------------
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


async def open_loop(
    call: Callable[[int, int], Coroutine[Any, Any, T]], count: int, rate_per_s: float, timeout_s: float
) -> list[T]:
    """`call(index, due_ns)` `count` times at `rate_per_s`, each when due (epoch ns, from 0.1 s on),
    not waiting for earlier answers; their answers in order, all within `timeout_s` of the last."""
    start_ns = time.time_ns() + 100_000_000
    tasks = []
    for index in range(count):
        due_ns = start_ns + int(index * 1e9 / rate_per_s)
        await asyncio.sleep(max(0.0, (due_ns - time.time_ns()) / 1e9))
        tasks.append(asyncio.create_task(call(index, due_ns)))
    return list(await asyncio.wait_for(asyncio.gather(*tasks), timeout=timeout_s))


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


# -- one run -----------------------------------------------------------------------------------
def is_dump(arrival: Arrival) -> bool:
    return arrival.kind == "dump"


@dataclass
class BenchConfig:
    compress: float
    budget: int
    timeout_s: float
    work_dir: Path
    log: Callable[[str], None] = print


@dataclass
class PipelineRun:
    """What one run recorded. `results` are the first outcome per request id on the reply topic."""

    name: str
    topic_prefix: str
    env: dict[str, str]
    seconds: float
    submissions: list[Submission]
    results: dict[str, InferenceResult]
    backend_stats: dict[str, Any]
    effective_budget_samples: list[tuple[int, int]]
    duplicates_on_reply_topic: int
    missing_ids: list[str] = field(default_factory=list)
    # The dispatchers' preemption counters at the end (`dispatcher_samples`).
    dispatcher_samples: list[dict[str, Any]] = field(default_factory=list)


async def _drive(
    pipeline: Pipeline,
    trace: list[Arrival],
    tag: str,
    collector: ResultCollector,
    timeout_s: float,
    in_child: Callable[[Arrival], bool],
    keys: Mapping[str, str] | None,
) -> tuple[list[Submission], dict[str, InferenceResult], list[tuple[int, int]]]:
    samples: list[tuple[int, int]] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_health(pipeline.dispatcher_url(0), samples, stop))
    child = [a for a in trace if in_child(a)]
    here = [a for a in trace if not in_child(a)]
    # Both processes start the trace at the same instant, late enough for the child to be up.
    start_wall_s = time.time() + CHILD_START_LEAD_S
    child_bound_s = CHILD_START_LEAD_S + max((a.offset_ms for a in child), default=0) / 1000 + CHILD_TIMEOUT_S
    loop = asyncio.get_running_loop()
    url = pipeline.ingest_url
    try:
        # spawn, not fork: this process runs librdkafka threads (the result reader), unsafe to fork.
        with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
            posted = loop.run_in_executor(
                pool, submit_in_process, url, child, tag, start_wall_s, dict(keys or {})
            )
            sent = await submit_trace(url, here, tag, start_wall_s, keys)
            try:
                from_child = await asyncio.wait_for(posted, timeout=child_bound_s)
            except TimeoutError as exc:
                load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
                raise RuntimeError(
                    f"the process posting {len(child)} requests had not finished {child_bound_s:.0f} s after "
                    f"the rest of the trace (load average {load}): the machine cannot post this trace"
                ) from exc
        submissions = sorted([*sent, *from_child], key=lambda s: s.index)
        accepted = {s.request_id for s in submissions if s.accepted}
        results = await asyncio.to_thread(collector.wait_for, accepted, timeout_s)
    finally:
        stop.set()
        await asyncio.wait({sampler}, timeout=5.0)
    return submissions, results, samples


def run_pipeline(
    bootstrap: str,
    name: str,
    trace: list[Arrival],
    config: BenchConfig,
    *,
    env: Callable[[str], dict[str, str]],
    in_child: Callable[[Arrival], bool] = is_dump,
    keys: Mapping[str, str] | None = None,
) -> PipelineRun:
    """`trace` through fresh topics and processes; `env(prefix)` is every service's environment,
    `keys` the API key of each tenant of the trace (None: open mode)."""
    tag = f"{name}-{uuid.uuid4().hex[:8]}"
    prefix = f"bench.{tag}"
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix)
    create_topics(kafka)
    service_env = env(prefix)
    pipeline = Pipeline(
        bootstrap=bootstrap,
        work_dir=config.work_dir / tag,
        ports=PipelinePorts(*pick_free_ports(4)),
        topic_prefix=prefix,
        budget=config.budget,
        backend_args=["--speed", f"{config.compress:g}"],
        extra_env=service_env,
    )
    collector = ResultCollector(bootstrap, kafka.topics.results, group_id=f"{prefix}-bench")
    started = time.monotonic()
    try:
        ready = pipeline.start(timeout_s=120.0)
        config.log(f"[{name}] services ready: " + ", ".join(f"{n} {s:.1f} s" for n, s in ready.items()))
        httpx.post(f"{pipeline.backend_url}/admin/reset", timeout=5.0).raise_for_status()
        collector.start()
        submissions, results, samples = asyncio.run(
            _drive(pipeline, trace, tag, collector, config.timeout_s, in_child, keys)
        )
        backend = pipeline.backend_stats()
        counters = dispatcher_samples(pipeline, "inferq_preempt")
    finally:
        collector.stop()
        pipeline.stop()
    run = PipelineRun(
        name=name,
        topic_prefix=prefix,
        env=service_env,
        seconds=time.monotonic() - started,
        submissions=submissions,
        results=results,
        backend_stats=backend,
        effective_budget_samples=samples,
        duplicates_on_reply_topic=collector.duplicates,
        missing_ids=sorted(s.request_id for s in submissions if s.accepted and s.request_id not in results),
        dispatcher_samples=counters,
    )
    config.log(
        f"[{name}] done in {run.seconds:.0f} s: {len(results)} outcomes, {len(run.missing_ids)} missing"
    )
    return run


def dispatcher_samples(pipeline: Pipeline, prefix: str) -> list[dict[str, Any]]:
    """The samples named `prefix`... of every dispatcher's /metrics (the run's own counters: its
    dispatchers are fresh processes)."""
    samples: list[dict[str, Any]] = []
    for index in range(len(pipeline.dispatchers)):
        text = httpx.get(f"{pipeline.dispatcher_url(index)}/metrics", timeout=5.0).text
        scrape = Scrape.parse(text, time.monotonic())
        samples += [
            {"name": x.name, "labels": dict(x.labels), "value": x.value}
            for x in scrape.samples
            if x.name.startswith(prefix)
        ]
    return samples


SUBMISSION_COLUMNS: tuple[str, ...] = (
    "index",
    "request_id",
    "kind",
    "tier",
    "due_ms",
    "sent_ms",
    "answered_ms",
    "status",
    "tenant",
)
# An outcome's column and the result's field it holds.
OUTCOME_COLUMNS = {
    "request_id": "request_id",
    "tier": "tier",
    "status": "status",
    "enqueued_ms": "enqueued_at_ms",
    "dispatched_ms": "dispatched_at_ms",
    "completed_ms": "completed_at_ms",
    "attempts": "attempts",
    "tenant": "tenant",
}


def _plain(value: object) -> object:
    """A JSON-ready cell: an enum (tier, status) by its value."""
    return value.value if isinstance(value, Enum) else value


def raw_records(run: PipelineRun) -> dict[str, Any]:
    """Every submission and outcome, compact, so tables can be recomputed or dug into without a rerun."""
    return {
        "run": run.name,
        "topic_prefix": run.topic_prefix,
        "seconds": run.seconds,
        "env": run.env,
        "backend_stats": run.backend_stats,
        "effective_budget_samples": run.effective_budget_samples,
        "duplicates_on_reply_topic": run.duplicates_on_reply_topic,
        "dispatcher_samples": run.dispatcher_samples,
        "submission_errors": [s.error for s in run.submissions if s.status is None][:20],
        "submissions_columns": list(SUBMISSION_COLUMNS),
        "submissions": [[_plain(getattr(s, c)) for c in SUBMISSION_COLUMNS] for s in run.submissions],
        "outcomes_columns": list(OUTCOME_COLUMNS),
        "outcomes": [[_plain(getattr(r, f)) for f in OUTCOME_COLUMNS.values()] for r in run.results.values()],
        "retried": sum(1 for r in run.results.values() if r.attempts > 1),
    }
