"""`inferq bench latency`: the latency inferq adds with free slots, at a steady 200 requests/s.

Per run, from fresh topics and processes: the recording backend (`recorder.py`, fixed small latency,
no limit), then the pipeline (`services/tools/stack`: ingest, results, one dispatcher with a budget far above
what the load needs, so a request never waits for a token). The dispatcher runs under the fetch probe
(`probe.py`) unless `--no-probe`. The request topic is switched to LogAppendTime so each record
carries the broker's append instant. HIGH chat requests are posted over HTTP at a steady rate
(open loop: the send times do not wait for answers); the first `warmup_s` are sent but not counted.
Then every accepted request's instants are joined (see `latency_report.py`) and summarized.

Writes `<out>/latency.json` (every sample) and `<out>/latency.md`, and prints the markdown.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvloop

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import request_codec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import Tier
from inferq.tools.bench.cpu import CpuWindow
from inferq.tools.bench.kafka import RecordCounter, bench_broker, create_with_log_append_time, read_topic
from inferq.tools.bench.latency_report import (
    HEADLINE,
    Dist,
    Joined,
    Placed,
    Second,
    join,
    runs_table,
    seconds_table,
    step_stats,
    steps_table,
    target_rows,
    timeline,
    worst_seconds,
)
from inferq.tools.bench.machine import (
    TARGET_HEAD,
    cell,
    header,
    publish,
    run_record,
    table,
)
from inferq.tools.bench.pipeline_run import open_loop
from inferq.tools.bench.probe import record_key
from inferq.tools.bench.procs import dispatcher_env, dispatcher_process
from inferq.tools.bench.recorder import marked_content
from inferq.tools.bench.specs import LatencySpec
from inferq.tools.broker.broker import pick_free_ports
from inferq.tools.measures import percentile
from inferq.tools.stack.pipeline import Pipeline, PipelinePorts
from inferq.tools.stack.process import ServiceProcess

HTTP_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
SETTLE_TIMEOUT_S = 30.0
SAMPLE_COLUMNS = (
    "request_id",
    "due_ns",
    "sent_ns",
    "answered_ns",
    "created_ms",
    "appended_ms",
    "consumed_ns",
    "dispatched_ms",
    "received_ns",
)


@dataclass(frozen=True)
class Sent:
    index: int
    request_id: str
    due_ns: int
    sent_ns: int
    answered_ns: int
    status: int | None


async def send_steady(ingest_url: str, spec: LatencySpec, tag: str) -> list[Sent]:
    """POST one HIGH chat every 1/rate s for warmup + duration seconds, each when due, not waiting
    for earlier answers; each carries its request_id as the backend marker.

    aiohttp, not httpx: on two shared cores the client's own CPU is taken from the pipeline it
    measures, and httpx costs several times more per request (see the throughput benchmark)."""
    total = int((spec.warmup_s + spec.duration_s) * spec.rate_per_s)
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    async with aiohttp.ClientSession(base_url=ingest_url, connector=connector, timeout=timeout) as client:

        async def post(index: int, due_ns: int) -> Sent:
            request_id = f"{tag}-{index:05d}"
            body = {
                "scenario": "realtime_chat",
                "request_id": request_id,
                "messages": [{"role": "user", "content": marked_content(request_id)}],
            }
            sent = time.time_ns()
            status: int | None = None
            try:
                async with client.post("/v1/requests", json=body) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                status = None
            return Sent(index, request_id, due_ns, sent, time.time_ns(), status)

        return await open_loop(post, total, spec.rate_per_s, HTTP_TIMEOUT_S + 5.0)


def _wait_until(what: str, check: Callable[[], bool], timeout_s: float, log: Callable[[str], None]) -> None:
    """Wait (bounded) for `check`; past the bound the run goes on and the stragglers are reported
    missing: a backlog that did not drain in time is the result, not a reason to lose the run."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            log(f"  {what}: not reached {timeout_s:.0f} s after the last send; the rest count as missing")
            return
        time.sleep(0.2)


def _recorder_marked(url: str) -> int:
    try:
        return int(httpx.get(f"{url}/stats", timeout=2.0).json()["marked"])
    except (httpx.HTTPError, ValueError, KeyError):
        return -1


def _placed(bootstrap: str, topic: str) -> tuple[dict[str, Placed], bool]:
    codec = request_codec()
    placed: dict[str, Placed] = {}
    append_time = True
    for read in read_topic(bootstrap, topic):
        request = codec.decode(read.value)
        append_time = append_time and read.log_append_time
        placed[request.request_id] = Placed(
            record_key(topic, read.partition, read.offset),
            request.created_at_ms,
            read.timestamp_ms if read.log_append_time else None,
        )
    return placed, append_time


def _dispatched(bootstrap: str, topic: str) -> tuple[dict[str, int], dict[str, int]]:
    """dispatched_at_ms of the first result per request_id; and the count of results by status."""
    codec = result_codec()
    dispatched: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for read in read_topic(bootstrap, topic):
        try:
            result = codec.decode(read.value)
        except DecodeError:
            statuses["undecodable"] = statuses.get("undecodable", 0) + 1
            continue
        statuses[result.status.value] = statuses.get(result.status.value, 0) + 1
        if result.dispatched_at_ms is not None:
            dispatched.setdefault(result.request_id, result.dispatched_at_ms)
    return dispatched, statuses


def run_one(
    bootstrap: str, spec: LatencySpec, label: str, work_dir: Path, log: Callable[[str], None]
) -> dict[str, Any]:
    tag = f"lat-{label}-{uuid.uuid4().hex[:6]}"
    prefix = f"bench.{tag}"
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix)
    high = kafka.topics.requests(Tier.HIGH)
    create_with_log_append_time(bootstrap, next(s for s in kafka.topics.specs() if s.name == high))
    create_topics(kafka)
    run_dir = work_dir / tag
    ingest_port, results_port, dispatcher_port, sim_port, recorder_port = pick_free_ports(5)
    recorder_url = f"http://127.0.0.1:{recorder_port}"
    recorder = ServiceProcess(
        "recorder",
        ["bench", "recorder", "--port", str(recorder_port), "--latency-ms", f"{spec.backend_latency_ms:g}"],
        run_dir / "logs" / "recorder.log",
    )
    extra = {
        "INFERQ_DISPATCHER_BACKEND_URL": f"{recorder_url}/v1",
        "INFERQ_DISPATCHER_SCHEDULE_PIN": "peak",
        # Ingest's admission sized for this backend: by default it assumes a budget of 10 and 0.5 s
        # calls (HIGH capacity 60), and at 200/s the committed-offset lag runs into that (0.2 s of
        # commit interval alone is 40 records): requests were refused 429 with every slot free.
        "INFERQ_BUDGET": str(spec.budget),
        "INFERQ_TYPICAL_LATENCY_S": json.dumps({Tier.HIGH.value: spec.backend_latency_ms / 1000}),
    }
    pipeline = Pipeline(
        bootstrap=bootstrap,
        work_dir=run_dir,
        ports=PipelinePorts(ingest_port, results_port, dispatcher_port, sim_port),
        topic_prefix=prefix,
        budget=spec.budget,
        # Pipeline also starts the simulated backend; it stays idle, the dispatcher calls the recorder.
        extra_env=extra,
    )
    fetch_log = run_dir / "fetches.json" if spec.probe else None
    dispatcher = dispatcher_process(
        "dispatcher-0",
        dispatcher_port,
        dispatcher_env(
            bootstrap=bootstrap,
            prefix=prefix,
            backend_url=f"{recorder_url}/v1",
            budget=spec.budget,
            dispatcher_id=f"{prefix}-d0",
            extra=extra,
        ),
        run_dir / "logs",
        fetch_log=fetch_log,
    )
    load_before = _load()
    try:
        recorder.start()
        recorder.wait_http_ready(f"{recorder_url}/healthz", 60.0)
        pipeline.start(dispatchers=0, timeout_s=120.0)
        # Added to the pipeline's lists, so that its stop() stops it in the right order.
        pipeline.processes.append(dispatcher)
        pipeline.dispatchers.append(dispatcher)
        dispatcher.start()
        pipeline.wait_dispatcher_assigned(0, 120.0)
        seconds = spec.warmup_s + spec.duration_s
        log(f"[{label}] pipeline ready; sending {spec.rate_per_s:g}/s for {seconds:g} s")
        pids = {p.name: p.pid for p in pipeline.processes} | {"recorder": recorder.pid, "client": os.getpid()}
        window = CpuWindow(pids)
        window.start()
        sent = uvloop.run(send_steady(pipeline.ingest_url, spec, tag))
        cpu = window.stop()
        accepted = [s for s in sent if s.status == 202]
        _wait_until(
            "every accepted request at the backend",
            lambda: _recorder_marked(recorder_url) >= len(accepted),
            SETTLE_TIMEOUT_S,
            log,
        )
        with RecordCounter(bootstrap, kafka.topics.results) as results:
            _wait_until(
                "a result for every accepted request",
                lambda: results.count() >= len(accepted),
                SETTLE_TIMEOUT_S,
                log,
            )
        arrivals: dict[str, int] = httpx.get(f"{recorder_url}/arrivals", timeout=10.0).json()["arrivals"]
        backend = httpx.get(f"{recorder_url}/stats", timeout=5.0).json()
    finally:
        pipeline.stop()
        recorder.stop()
    placed, append_time = _placed(bootstrap, high)
    dispatched, statuses = _dispatched(bootstrap, kafka.topics.results)
    consumed: dict[str, int] | None = None
    if fetch_log is not None and fetch_log.exists():  # not there if the dispatcher had to be killed
        consumed = {str(k): int(v) for k, v in json.loads(fetch_log.read_text(encoding="utf-8")).items()}
    first_measured = int(spec.warmup_s * spec.rate_per_s)
    measured = {
        s.request_id: (s.due_ns, s.sent_ns, s.answered_ns) for s in accepted if s.index >= first_measured
    }
    joined = join(measured, placed, consumed, dispatched, arrivals)
    stats = step_stats(joined.samples)
    head = stats[HEADLINE]
    log(
        f"[{label}] {len(joined.samples)} samples; {HEADLINE}: "
        + (f"p50 {head.p50:.1f} ms, p99 {head.p99:.1f} ms" if head else "no samples")
    )
    raw = _raw(label, prefix, spec, sent, joined, stats, statuses, backend, append_time, load_before)
    return raw | {
        "cpu_during_send": asdict(cpu) | {"others_s": cpu.others_s},
        "timeline": [asdict(second) for second in timeline(joined.samples)],
    }


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()[:2]]


def _raw(
    label: str,
    prefix: str,
    spec: LatencySpec,
    sent: list[Sent],
    joined: Joined,
    stats: dict[str, Dist | None],
    statuses: dict[str, int],
    backend: dict[str, Any],
    append_time: bool,
    load_before: list[float],
) -> dict[str, Any]:
    lags_ms = [(s.sent_ns - s.due_ns) / 1e6 for s in sent]
    by_status: dict[str, int] = {}
    for s in sent:
        by_status[str(s.status)] = by_status.get(str(s.status), 0) + 1
    return {
        "run": label,
        "topic_prefix": prefix,
        "load_average_before_1m_5m": load_before,
        "load_average_after_1m_5m": _load(),
        "sent": len(sent),
        "ingest_answers": by_status,
        "client_send_lag_ms_p50_p99_max": [percentile(lags_ms, 50), percentile(lags_ms, 99), max(lags_ms)],
        "results_by_status": statuses,
        "backend": backend,
        "log_append_time": append_time,
        "missing": {k: {"count": len(v), "first": v[:10]} for k, v in joined.missing.items()},
        "steps": {k: None if d is None else asdict(d) for k, d in stats.items()},
        "samples_columns": list(SAMPLE_COLUMNS),
        "samples": [[getattr(s, column) for column in SAMPLE_COLUMNS] for s in joined.samples],
    }


def run(spec: LatencySpec, *, out: Path, home: Path) -> int:
    log = print
    started = time.monotonic()
    raws: list[dict[str, Any]] = []
    with bench_broker(home, log) as bootstrap:
        for index in range(spec.runs):
            raws.append(run_one(bootstrap, spec, f"run{index + 1}", home, log))
    took = time.monotonic() - started
    stats = [_stats_of(r) for r in raws]
    document = {
        **run_record("latency", took),
        "spec": asdict(spec),
        "targets": [
            {"target": t, "measured_ms": v, "limit_ms": lim, "verdict": verdict}
            for t, v, lim, verdict in target_rows(stats)
        ],
        "runs": raws,
    }
    markdown = render(document, stats)
    publish(out, "latency", document, markdown)
    missing = sum(m["count"] for r in raws for k, m in r["missing"].items() if k != "fetch probe")
    return 0 if missing == 0 else 1


def _stats_of(raw: dict[str, Any]) -> dict[str, Dist | None]:
    return {k: None if d is None else Dist(**d) for k, d in raw["steps"].items()}


def _cpu_line(cpu: dict[str, Any]) -> str:
    wall = cpu["wall_s"] or 1.0
    ours = ", ".join(f"{name} {used / wall:.0%}" for name, used in sorted(cpu["by_process_s"].items()))
    return (
        f"CPU while sending (share of one core over {wall:.1f} s): {ours}; everything else on the machine "
        f"(the broker, other work) {cpu['others_s'] / wall:.0%}; machine busy "
        f"{cpu['machine_busy_s'] / (cpu['machine_capacity_s'] or 1.0):.0%} of its cores."
    )


def _run_label(raw: dict[str, Any]) -> str:
    late = raw["missing"].get("backend", {}).get("count", 0)
    return f"{raw['run']} ({late} never reached the backend)" if late else str(raw["run"])


def render(document: dict[str, Any], stats: list[dict[str, Dist | None]]) -> str:
    spec = document["spec"]
    labels = [_run_label(r) for r in document["runs"]]
    targets = [
        (t["target"], cell(t["measured_ms"], ".1f", " ms"), f"<= {t['limit_ms']:g} ms", t["verdict"])
        for t in document["targets"]
    ]
    details = []
    for raw, run_stats in zip(document["runs"], stats, strict=True):
        lag = raw["client_send_lag_ms_p50_p99_max"]
        missing = ", ".join(f"{k} {v['count']}" for k, v in raw["missing"].items()) or "none"
        stamps = "LogAppendTime" if raw["log_append_time"] else "CreateTime (the append steps are empty)"
        details += [
            f"### {raw['run']}",
            "",
            f"Sent {raw['sent']} (ingest answered {raw['ingest_answers']}); "
            f"results {raw['results_by_status']}; "
            f"backend calls {raw['backend'].get('calls')} over "
            f"{raw['backend'].get('connections')} connections (repeated {raw['backend'].get('repeated')}, "
            f"unmarked {raw['backend'].get('unmarked')}); missing: {missing}; client send lag p50/p99/max "
            f"{lag[0]:.1f}/{lag[1]:.1f}/{lag[2]:.1f} ms; load average before/after "
            f"{raw['load_average_before_1m_5m']} / {raw['load_average_after_1m_5m']}; "
            f"broker timestamps {stamps}.",
            "",
            _cpu_line(raw["cpu_during_send"]),
            "",
            steps_table(run_stats),
            "",
            "Worst seconds (by the slowest request sent in them; client lag = how late the bench itself "
            "sent, so a stall of the whole machine shows there too):",
            "",
            seconds_table(worst_seconds([Second(**t) for t in raw["timeline"]])),
            "",
        ]
    return "\n".join(
        [
            "# Added-latency benchmark",
            "",
            header(document),
            "",
            f"{spec['runs']} runs, each from fresh topics and processes: HIGH chat posted to ingest at "
            f"{spec['rate_per_s']:g}/s for {spec['duration_s']:g} s after a {spec['warmup_s']:g} s warm-up "
            f"(not counted); one dispatcher, budget {spec['budget']}, "
            f"{'with' if spec['probe'] else 'without'} the fetch probe; recording backend answering after "
            f"{spec['backend_latency_ms']:g} ms. Milliseconds.",
            "",
            "## Per run",
            "",
            runs_table(stats, labels),
            "",
            "## Targets",
            "",
            *table(TARGET_HEAD, targets),
            "",
            "## Every step, per run",
            "",
            *details,
        ]
    )
