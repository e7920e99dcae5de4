"""`inferq bench delivery`: the latency the queue adds to an OpenAI chat completion, side by side.

One run, one broker, one pipeline (`services/tools/stack`: ingest, results, one dispatcher with a
budget far above the load, so nothing waits for a token) and its simulated backend, with a fixed
latency. Four phases, one after the other, each `warmup_s` (sent, not counted) + `duration_s` at
`rate_per_s` open loop (each call sent when due, not waiting for earlier answers), the same aiohttp
client and the same marked bodies: the simulator directly, then ingest's POST
/v1/chat/completions (HIGH), first without then with `stream: true`. The simulator stamps each
call (received, first token, done: `simbackend/timings.py`); the analysis is `delivery_report.py`.

Writes `<out>/delivery.json` (every call) and `<out>/delivery.md`, and prints the markdown.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import chunk_codec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import Tier
from inferq.tools.bench.cpu import CpuUse, CpuWindow
from inferq.tools.bench.delivery_report import (
    Call,
    Phase,
    PhaseStats,
    ReplyStamps,
    legs_ms,
    legs_table,
    phase_stats,
    phase_table,
    targets,
)
from inferq.tools.bench.kafka import bench_broker, create_with_log_append_time, read_topic
from inferq.tools.bench.machine import (
    TARGET_HEAD,
    cell,
    header,
    publish,
    run_record,
    table,
)
from inferq.tools.bench.pipeline_run import open_loop
from inferq.tools.bench.procs import SIM_MODELS
from inferq.tools.bench.recorder import marked_content
from inferq.tools.bench.specs import DeliverySpec
from inferq.tools.broker.broker import pick_free_ports
from inferq.tools.measures import Stats
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


async def send_phase(url: str, spec: DeliverySpec, tag: str, *, stream: bool, inferq: bool) -> list[Call]:
    """Open loop: one call every 1/rate s for warmup + duration, each when due; the warm-up's calls
    are dropped from the answer."""
    total = int((spec.warmup_s + spec.duration_s) * spec.rate_per_s)
    first_counted = int(spec.warmup_s * spec.rate_per_s)
    headers = {"X-Inferq-Priority": Tier.HIGH.value} if inferq else {}
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def call(index: int, due_ns: int) -> Call:
            content = marked_content(f"{tag}-{index:05d}")
            body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": stream}
            return await _call(client, url, body, headers, due_ns)

        calls = await open_loop(call, total, spec.rate_per_s, HTTP_TIMEOUT_S + 10.0)
    return calls[first_counted:]


def run(spec: DeliverySpec, *, out: Path, home: Path) -> int:
    log = print
    started = time.monotonic()
    tag = f"dlv-{uuid.uuid4().hex[:6]}"
    prefix = f"bench.{tag}"
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

    phases: list[Phase] = []
    stamps: dict[str, list[int | None]] = {}
    backend_stats: dict[str, object] = {}
    cpu: dict[str, CpuUse] = {}
    with bench_broker(home, log) as bootstrap:
        kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix)
        # The broker stamps each reply record as it appends it: where the time goes, per leg.
        reply_spec = next(s for s in kafka.topics.specs() if s.name == kafka.topics.results)
        create_with_log_append_time(bootstrap, reply_spec)
        create_topics(kafka)
        pipeline = Pipeline(
            bootstrap=bootstrap,
            work_dir=home / tag,
            ports=PipelinePorts(*pick_free_ports(4)),
            topic_prefix=prefix,
            budget=spec.budget,
            extra_env=extra,
        )
        try:
            pipeline.start(dispatchers=1, timeout_s=120.0)
            pids = {p.name: p.pid for p in pipeline.processes} | {"client": os.getpid()}
            time.sleep(spec.settle_s)
            for stream in (False, True):
                for via, url in (
                    ("direct", f"{pipeline.backend_url}/v1/chat/completions"),
                    ("inferq", f"{pipeline.ingest_url}/v1/chat/completions"),
                ):
                    label = f"{via}-{'stream' if stream else 'sync'}"
                    log(f"[{label}] {spec.rate_per_s:g}/s for {spec.warmup_s + spec.duration_s:g} s")
                    window = CpuWindow(pids)
                    window.start()
                    calls = uvloop.run(
                        send_phase(url, spec, f"{tag}-{label}", stream=stream, inferq=via == "inferq")
                    )
                    cpu[label] = window.stop()
                    phases.append(Phase(via, stream, calls))
            stamps = httpx.get(f"{pipeline.backend_url}/timings", timeout=30.0).json()["timings"]
            backend_stats = pipeline.backend_stats()
        finally:
            pipeline.stop()
        replies = reply_stamps(bootstrap, kafka.topics.results)
    took = time.monotonic() - started
    rows = [phase_stats(p, stamps) for p in phases]
    legs = {p.label: legs_ms(p.calls, stamps, replies, stream=p.stream) for p in phases if p.via == "inferq"}
    document = {
        **run_record("delivery", took),
        "spec": asdict(spec),
        "backend": backend_stats,
        "phases": [asdict(r) for r in rows],
        "legs": {
            label: {k: None if s is None else asdict(s) for k, s in v.items()} for label, v in legs.items()
        },
        "cpu": {label: asdict(use) | {"others_s": use.others_s} for label, use in cpu.items()},
        "targets": [asdict(t) | {"verdict": t.verdict} for t in targets({r.label: r for r in rows})],
        "calls": {p.label: [asdict(c) for c in p.calls] for p in phases},
        "backend_stamps": stamps,
    }
    markdown = render(document, rows, legs)
    publish(out, "delivery", document, markdown)
    return 0 if all(r.complete == r.sent for r in rows) else 1


def _cpu_line(label: str, cpu: dict[str, Any]) -> str:
    wall = cpu["wall_s"] or 1.0
    ours = ", ".join(f"{name} {used / wall:.0%}" for name, used in sorted(cpu["by_process_s"].items()))
    busy = cpu["machine_busy_s"] / (cpu["machine_capacity_s"] or 1.0)
    return f"- {label}: {ours}; everything else {cpu['others_s'] / wall:.0%}; machine busy {busy:.0%}."


def reply_stamps(bootstrap: str, topic: str) -> dict[str, ReplyStamps]:
    """Per request_id, the first chunk's and the first result's instants on the reply topic."""
    chunks, results = chunk_codec(), result_codec()
    out: dict[str, ReplyStamps] = {}
    for read in read_topic(bootstrap, topic):
        appended = read.timestamp_ms if read.log_append_time else None
        try:
            chunk = chunks.decode(read.value)
        except DecodeError:
            chunk = None
        if chunk is not None:
            before = out.get(chunk.request_id, ReplyStamps())
            # The first chunk in the partition's order (one partition per request) is the first sent.
            if before.chunk_created_ms is None:
                out[chunk.request_id] = replace(
                    before, chunk_created_ms=chunk.created_at_ms, chunk_appended_ms=appended
                )
            continue
        try:
            result = results.decode(read.value)
        except DecodeError:
            continue
        before = out.get(result.request_id, ReplyStamps())
        if before.result_appended_ms is None:
            out[result.request_id] = replace(before, result_appended_ms=appended)
    return out


def render(document: dict[str, Any], rows: list[PhaseStats], legs: dict[str, dict[str, Stats | None]]) -> str:
    spec = document["spec"]
    linger = spec["chunk_linger_ms"]
    target_rows = [
        (t["name"], cell(t["measured_ms"], ".1f", " ms"), f"<= {t['limit_ms']:g} ms", t["verdict"])
        for t in document["targets"]
    ]
    return "\n".join(
        [
            "# Delivery benchmark: direct vs through inferq",
            "",
            header(document),
            "",
            f"Each phase: {spec['rate_per_s']:g} calls/s open loop for {spec['duration_s']:g} s after a "
            f"{spec['warmup_s']:g} s warm-up (not counted), one aiohttp client; simulated backend with a "
            f"fixed {spec['backend_latency_ms']:g} ms per call; one dispatcher, budget {spec['budget']}; "
            f"chunk linger {'default' if linger is None else f'{linger:g} ms'}. Milliseconds. "
            "Overhead = client's wait minus the backend's own time for that call "
            "(both stamped on this machine's clock).",
            "",
            phase_table(rows),
            "",
            "Where the time goes through inferq (broker append times, ms resolution):",
            "",
            *(line for label, by_leg in legs.items() for line in (f"{label}:", "", legs_table(by_leg), "")),
            "CPU while sending (share of one core; everything else: the broker and other work here):",
            "",
            *(_cpu_line(label, use) for label, use in document["cpu"].items()),
            "",
            *table(TARGET_HEAD, target_rows),
            "",
        ]
    )
