"""`inferq bench delivery`: the latency and the CPU the queue adds to an OpenAI chat completion.

One broker, one pipeline (`services/tools/stack`: ingest, results, one dispatcher with a budget far
above the load, so nothing waits for a token) and its simulated backend, with a fixed latency. Each
run measures every rate (default 20 and 200 calls/s); each rate, four phases one after the other,
each `warmup_s` (sent, not counted) + `duration_s` open loop (each call sent when due, not waiting
for earlier answers), the same aiohttp client and the same marked bodies: the simulator directly,
then ingest's POST /v1/chat/completions (HIGH), first without then with `stream: true`. The
simulator stamps each call (received, first token, done: `simbackend/timings.py`); a CPU window
around each phase reads the services' and the broker's CPU time (`cpu.py`, `delivery_broker.py`).
The analysis is `delivery_report.py` (per phase) and `delivery_verdicts.py` (CPU per call, medians
over the runs, the targets).

The runs share the pipeline (start-up is a minute; a fresh one per run would triple it): a run is
a repeat of the measurement on a warm queue, not a cold start.

Writes `<out>/delivery.json` (every call) and `<out>/delivery.md`, and prints the markdown.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import chunk_codec, request_codec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicSpec
from inferq.tools.bench.cpu import CpuUse, CpuWindow
from inferq.tools.bench.delivery_broker import broker_pid
from inferq.tools.bench.delivery_floor import Floor, KafkaTrip, floor, floor_table, kafka_trip
from inferq.tools.bench.delivery_report import Call, Phase, ReplyStamps, legs_table
from inferq.tools.bench.delivery_verdicts import (
    BROKER,
    RateSample,
    RateSummary,
    Target,
    cpu_table,
    median_stats,
    rate_run,
    summarize,
    summary_table,
    targets,
    targets_table,
)
from inferq.tools.bench.kafka import bench_broker, create_with_log_append_time, read_topic
from inferq.tools.bench.machine import header, publish, run_record
from inferq.tools.bench.pipeline_run import open_loop
from inferq.tools.bench.procs import SIM_MODELS
from inferq.tools.bench.recorder import marked_content
from inferq.tools.bench.specs import DeliverySpec
from inferq.tools.broker.broker import pick_free_ports
from inferq.tools.stack.pipeline import Pipeline, PipelinePorts

MODEL = "inferq-fast"
HTTP_TIMEOUT_S = 15.0
# Ten times the calls in flight at 200/s (100 ms direct, 150-200 ms through inferq): a call never
# waits for a connection. The client is aiohttp: httpx's pool re-scans itself on each request
# (encode/httpcore#928), and through inferq the httpx client took 81% of a core at 200/s (31%
# direct, same calls) and fell 22-38 s behind its schedule on an otherwise quiet machine.
MAX_CONNECTIONS = 256


async def _call(
    client: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str], due_ns: int
) -> Call:
    request_id = body["messages"][0]["content"].split(" ", 1)[0].split(":", 1)[1]
    sent = time.time_ns()
    first: int | None = None
    status: int | None = None
    complete = False
    inferq_id: str | None = None
    answered: int | None = None
    try:
        async with client.post(url, json=body, headers=headers) as response:
            status = response.status
            inferq_id = response.headers.get("x-inferq-request-id")
            if not body["stream"]:
                complete = status == 200 and bool((await response.json()).get("choices"))
            else:
                async for raw in response.content:
                    line = raw.decode().rstrip("\r\n")
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        # Answered now; the body is still read to its end so the connection is
                        # reused (a new connection per streamed call otherwise).
                        complete = status == 200
                        answered = time.time_ns()
                        continue
                    if first is None:
                        choices = json.loads(data).get("choices") or [{}]
                        if (choices[0].get("delta") or {}).get("content"):
                            first = time.time_ns()
    except (aiohttp.ClientError, TimeoutError, ValueError):
        complete = False
    end = time.time_ns()
    return Call(request_id, due_ns, sent, answered or end, first, status, complete, inferq_id)


async def send_phase(
    url: str, spec: DeliverySpec, rate_per_s: float, tag: str, *, stream: bool, inferq: bool
) -> list[Call]:
    """Open loop: one call every 1/rate s for warmup + duration, each when due; every call, the
    warm-up's first (`warmup_calls` says how many)."""
    total = int((spec.warmup_s + spec.duration_s) * rate_per_s)
    headers = {"X-Inferq-Priority": Tier.HIGH.value} if inferq else {}
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def call(index: int, due_ns: int) -> Call:
            content = marked_content(f"{tag}-{index:05d}")
            body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": stream}
            return await _call(client, url, body, headers, due_ns)

        return await open_loop(call, total, rate_per_s, HTTP_TIMEOUT_S + 10.0)


def warmup_calls(spec: DeliverySpec, rate_per_s: float) -> int:
    return int(spec.warmup_s * rate_per_s)


def measure_rate(
    pipeline: Pipeline, spec: DeliverySpec, rate_per_s: float, tag: str, pids: dict[str, int]
) -> RateSample:
    """The four phases at one rate: sync then streamed, each direct then through inferq (the direct
    phase is also the queue's idle baseline for its CPU per call)."""
    phases: list[Phase] = []
    cpu: dict[str, CpuUse] = {}
    answered: dict[str, int] = {}
    for stream in (False, True):
        for via, url in (
            ("direct", f"{pipeline.backend_url}/v1/chat/completions"),
            ("inferq", f"{pipeline.ingest_url}/v1/chat/completions"),
        ):
            mode = "stream" if stream else "sync"
            print(f"[{tag} {via}-{mode}] {rate_per_s:g}/s for {spec.warmup_s + spec.duration_s:g} s")
            window = CpuWindow(pids)
            window.start()
            calls = uvloop.run(
                send_phase(
                    url, spec, rate_per_s, f"{tag}-{via}-{mode}", stream=stream, inferq=via == "inferq"
                )
            )
            phase = Phase(via, stream, calls[warmup_calls(spec, rate_per_s) :])
            time.sleep(spec.cpu_tail_s)
            cpu[phase.label] = window.stop()
            answered[phase.label] = sum(c.complete for c in calls)
            phases.append(phase)
    return RateSample(rate_per_s, phases, cpu, answered)


def prime(pipeline: Pipeline, spec: DeliverySpec, tag: str) -> None:
    """Calls through inferq, sync then streamed, not measured (`DeliverySpec.prime_s` says why)."""
    if spec.prime_s <= 0:
        return
    print(f"[{tag}] {spec.prime_s:g} s sync and {spec.prime_s:g} s streamed through inferq, not measured")
    priming = replace(spec, warmup_s=0.0, duration_s=spec.prime_s)
    url = f"{pipeline.ingest_url}/v1/chat/completions"
    for stream in (False, True):
        uvloop.run(
            send_phase(url, priming, max(spec.rates_per_s), f"{tag}-{stream}", stream=stream, inferq=True)
        )


def _environment(spec: DeliverySpec) -> dict[str, str]:
    latency_s = spec.backend_latency_ms / 1000
    extra = {
        "INFERQ_DISPATCHER_SCHEDULE_PIN": "peak",
        # Ingest's admission sized for this backend (as in the latency bench): nothing is refused.
        "INFERQ_BUDGET": str(spec.budget),
        "INFERQ_TYPICAL_LATENCY_S": json.dumps({Tier.HIGH.value: latency_s}),
        # One latency for every model: the direct and the queued calls meet the same backend.
        "INFERQ_SIM_LATENCY_S": json.dumps({m: latency_s for m in SIM_MODELS}),
    }
    if spec.chunk_linger_ms is not None:
        extra["INFERQ_DISPATCHER_STREAM_CHUNK_LINGER_MS"] = f"{spec.chunk_linger_ms:g}"
    return extra


def run(spec: DeliverySpec, *, out: Path, home: Path) -> int:
    log = print
    started = time.monotonic()
    tag = f"dlv-{uuid.uuid4().hex[:6]}"
    prefix = f"bench.{tag}"
    samples: list[tuple[int, RateSample]] = []
    trips: list[KafkaTrip] = []
    stamps: dict[str, list[int | None]] = {}
    backend_stats: dict[str, object] = {}
    broker: int | None = None
    with bench_broker(home, log) as bootstrap:
        kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix)
        # The broker stamps each reply and chunk record as it appends it: where the time goes, per leg.
        for reply_spec in reply_specs(kafka):
            create_with_log_append_time(bootstrap, reply_spec)
        create_topics(kafka)
        # The floor's Kafka trip (`delivery_floor.py`): a topic of its own, shaped as the reply topic.
        trip_topic = f"{prefix}.trip"
        create_with_log_append_time(bootstrap, replace(reply_specs(kafka)[0], name=trip_topic))
        pipeline = Pipeline(
            bootstrap=bootstrap,
            work_dir=home / tag,
            ports=PipelinePorts(*pick_free_ports(4)),
            topic_prefix=prefix,
            budget=spec.budget,
            extra_env=_environment(spec),
        )
        try:
            pipeline.start(dispatchers=1, timeout_s=120.0)
            broker = broker_pid(bootstrap)
            if broker is None:
                log("the broker is not a process of this machine's user: its CPU is not measured")
            pids = {p.name: p.pid for p in pipeline.processes if p.pid is not None}
            pids |= {"client": os.getpid()} | ({BROKER: broker} if broker is not None else {})
            time.sleep(spec.settle_s)
            prime(pipeline, spec, f"{tag}-prime")
            # Runs outermost: a disturbance of the machine lands in one run of every rate, not in
            # every run of one rate.
            for run_index in range(1, spec.runs + 1):
                for rate in spec.rates_per_s:
                    samples.append(
                        (run_index, measure_rate(pipeline, spec, rate, f"{tag}-r{run_index}-{rate:g}", pids))
                    )
                    print(f"[{tag}-r{run_index}-{rate:g} kafka trip] {rate:g}/s, the pipeline idle")
                    trips.append(
                        uvloop.run(kafka_trip(kafka, trip_topic, rate, spec.duration_s, spec.warmup_s))
                    )
            stamps = httpx.get(f"{pipeline.backend_url}/timings", timeout=30.0).json()["timings"]
            backend_stats = pipeline.backend_stats()
        finally:
            pipeline.stop()
        replies = reply_stamps(
            bootstrap, [s.name for s in reply_specs(kafka)], kafka.topics.requests(Tier.HIGH)
        )
    took = time.monotonic() - started
    runs = [(index, rate_run(sample, stamps, replies)) for index, sample in samples]
    summaries = [summarize([r for _, r in runs if r.rate_per_s == rate]) for rate in spec.rates_per_s]
    found = targets(summaries)
    floors = [
        floor_of(summary, [t for t in trips if t.rate_per_s == summary.rate_per_s]) for summary in summaries
    ]
    document = {
        **run_record("delivery", took),
        "spec": asdict(spec),
        "backend": backend_stats,
        "broker_cpu_measured": broker is not None,
        "summaries": [asdict(s) for s in summaries],
        "targets": [asdict(t) | {"verdict": t.verdict} for t in found],
        "floors": [asdict(f) for f, _, _ in floors],
        "kafka_trips": [asdict(t) for t in trips],
        "runs": [{"run": index} | asdict(r) for index, r in runs],
        "cpu": [
            {"run": index, "rate_per_s": s.rate_per_s}
            | {label: asdict(use) | {"others_s": use.others_s} for label, use in s.cpu.items()}
            for index, s in samples
        ],
        "calls": [
            {"run": index, "rate_per_s": s.rate_per_s}
            | {p.label: [asdict(c) for c in p.calls] for p in s.phases}
            for index, s in samples
        ],
        "backend_stamps": stamps,
    }
    publish(out, "delivery", document, render(document, summaries, found, floors))
    every_call_answered = all(p.complete == p.sent for s in summaries for p in s.paths.values())
    return 0 if every_call_answered else 1


def reply_stamps(bootstrap: str, topics: Sequence[str], requests_topic: str) -> dict[str, ReplyStamps]:
    """Per request_id, the first chunk's and the first result's instants on the reply `topics` (the
    results topic and the chunk topic), how many chunk records it took, and its request's append
    on the (LogAppendTime) requests topic."""
    chunks, results, requests = chunk_codec(), result_codec(), request_codec()
    out: dict[str, ReplyStamps] = {}
    for read in read_topic(bootstrap, requests_topic):
        if read.log_append_time:
            request_id = requests.decode(read.value).request_id
            out[request_id] = ReplyStamps(request_appended_ms=read.timestamp_ms)
    for read in (read for topic in topics for read in read_topic(bootstrap, topic)):
        appended = read.timestamp_ms if read.log_append_time else None
        try:
            chunk = chunks.decode(read.value)
        except DecodeError:
            chunk = None
        if chunk is not None:
            before = out.get(chunk.request_id, ReplyStamps())
            counted = replace(before, chunks=before.chunks + 1)
            # The first chunk in the partition's order (one partition per request) is the first sent.
            if before.chunk_created_ms is None:
                counted = replace(counted, chunk_created_ms=chunk.created_at_ms, chunk_appended_ms=appended)
            out[chunk.request_id] = counted
            continue
        try:
            result = results.decode(read.value)
        except DecodeError:
            continue
        before = out.get(result.request_id, ReplyStamps())
        if before.result_appended_ms is None:
            out[result.request_id] = replace(before, result_appended_ms=appended)
    return out


def reply_specs(kafka: KafkaSettings) -> list[TopicSpec]:
    """The results topic's and the chunk topic's specs (the broker stamps their records)."""
    replied = (kafka.topics.results, kafka.topics.chunks)
    return [s for s in kafka.topics.specs() if s.name in replied]


def floor_of(summary: RateSummary, trips: list[KafkaTrip]) -> tuple[Floor, float | None, float | None]:
    """The rate's floor from its runs' Kafka trips (medians) and direct phases, with what was
    measured through inferq beside it (sync added p50, first chunk p50)."""
    trip = KafkaTrip(
        summary.rate_per_s,
        median_stats([t.acked_ms for t in trips]),
        median_stats([t.read_ms for t in trips]),
        sum(t.sent for t in trips),
        sum(t.read for t in trips),
    )

    def p50(label: str, first_chunk: bool = False) -> float | None:
        path = summary.paths.get(label)
        figure = None if path is None else path.first_chunk_delay_ms if first_chunk else path.overhead_ms
        return None if figure is None else figure.p50

    found = floor(trip, p50("direct, sync"), p50("direct, stream", first_chunk=True))
    return found, p50("inferq, sync"), p50("inferq, stream", first_chunk=True)


def render(
    document: dict[str, Any],
    summaries: list[RateSummary],
    found: list[Target],
    floors: list[tuple[Floor, float | None, float | None]],
) -> str:
    spec = document["spec"]
    linger = spec["chunk_linger_ms"]
    rates = ", ".join(f"{r:g}" for r in spec["rates_per_s"])
    broker = (
        "" if document["broker_cpu_measured"] else " The broker's CPU is not measured (not a local process)."
    )
    legs = [
        line
        for s in summaries
        for label, by_leg in s.legs.items()
        for line in (f"{label}, {s.rate_per_s:g} calls/s:", "", legs_table(by_leg), "")
    ]
    return "\n".join(
        [
            "# Delivery benchmark: direct vs through inferq",
            "",
            header(document),
            "",
            f"{spec['runs']} run(s); in each, every rate ({rates} calls/s) runs four phases, each open "
            f"loop for {spec['duration_s']:g} s after a {spec['warmup_s']:g} s warm-up (not counted), one "
            f"aiohttp client; simulated backend with a fixed {spec['backend_latency_ms']:g} ms per call; "
            f"one dispatcher, budget {spec['budget']}; chunk linger "
            f"{'default' if linger is None else f'{linger:g} ms'}. Medians over the runs. Added: the "
            "client's wait minus the backend's own time for that call (both stamped on this machine's "
            "clock). First chunk: the client's first content chunk minus the backend's first token. "
            "CPU ms/call: ingest, dispatcher, results and the broker, minus their use over the direct "
            f"phase of the same mode (the queue idle), per answered call.{broker}",
            "",
            *summary_table(summaries),
            "",
            *targets_table(found),
            "",
            "The floor, measured in this run (`delivery_floor.py`): one Kafka trip is the product's "
            "producer (acks=all, idempotent, linger 0) to a group-less follower, at the rate, the "
            "pipeline idle; a sync call's floor is 2 x direct added + 2 x trip, a first chunk's one "
            "trip + the direct first-chunk delay (p50s):",
            "",
            *floor_table(floors),
            "",
            "CPU per call through inferq, by process (ms):",
            "",
            *cpu_table(summaries),
            "",
            "Where the time goes through inferq (broker append times, ms resolution; medians over runs):",
            "",
            *legs,
        ]
    )
