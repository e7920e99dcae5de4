"""`inferq bench memory`: the dispatcher's RSS with a million LOW requests waiting (target < 150 MB).

The records are produced straight to a fresh `<prefix>.requests.low` topic (Avro, the project's
codec); then one dispatcher (small budget, slow simulated backend, schedule pinned to peak so LOW has
one slot) runs for a while and its VmRSS is sampled. A dispatcher on empty topics, sampled the same
way, is the baseline. The group's lag at the end shows where the backlog stayed: in Kafka.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from inferq.clock import wall_ms
from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import Tier
from inferq.tools.bench.kafka import bench_broker, brief_requests, bulk_produce, group_lag
from inferq.tools.bench.machine import header, publish, run_record, table, verdict
from inferq.tools.bench.procs import dispatcher_env, dispatcher_process, sim_backend
from inferq.tools.broker.broker import pick_free_ports

TARGET_MB = 150.0


@dataclass(frozen=True)
class Sampled:
    label: str
    rss_mb: list[float]
    seconds_to_assigned: float | None
    health_at_end: dict[str, Any]
    lag_at_end: dict[int, int]

    @property
    def max_mb(self) -> float:
        return max(self.rss_mb)

    @property
    def median_mb(self) -> float:
        return statistics.median(self.rss_mb)


def rss_mb(pid: int) -> float | None:
    """VmRSS of `pid` in MB (2^20 bytes), or None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def sample_dispatcher(
    label: str,
    bootstrap: str,
    prefix: str,
    backend_url: str,
    *,
    budget: int,
    seconds: float,
    interval_s: float,
    work_dir: Path,
) -> Sampled:
    port = pick_free_ports(1)[0]
    env = dispatcher_env(
        bootstrap=bootstrap,
        prefix=prefix,
        backend_url=f"{backend_url}/v1",
        budget=budget,
        dispatcher_id=f"{label}-d0",
        extra={"INFERQ_DISPATCHER_SCHEDULE_PIN": "peak"},
    )
    proc = dispatcher_process(f"dispatcher-{label}", port, env, work_dir)
    samples: list[float] = []
    assigned_at: float | None = None
    health: dict[str, Any] = {}
    proc.start()
    started = time.monotonic()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=1.0) as client:
            next_at = started
            while time.monotonic() - started < seconds:
                pid = proc.pid
                value = rss_mb(pid) if pid is not None and proc.alive() else None
                if value is None:
                    raise RuntimeError(f"dispatcher {label} exited; see {proc.log_path}")
                samples.append(value)
                try:
                    health = client.get("/healthz").json()
                    if assigned_at is None and health.get("assigned", 0) > 0:
                        assigned_at = time.monotonic() - started
                except httpx.HTTPError:
                    pass  # not listening yet
                next_at += interval_s
                time.sleep(max(0.0, next_at - time.monotonic()))
        topics = KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix).topics
        low = next(spec for spec in topics.specs() if spec.name == topics.requests(Tier.LOW))
        lag = group_lag(bootstrap, env["INFERQ_DISPATCHER_GROUP_ID"], low.name, low.partitions)
    finally:
        proc.stop()
    return Sampled(label, samples, assigned_at, health, lag)


def run(
    records: int, *, budget: int, speed: float, seconds: float, interval_s: float, out: Path, home: Path
) -> int:
    log = print
    tag = uuid.uuid4().hex[:8]
    work_dir = home / f"memory-{tag}"
    started = time.monotonic()
    with bench_broker(home, log) as bootstrap:
        prefixes = {"baseline": f"bench.mem-empty-{tag}", "loaded": f"bench.mem-{tag}"}
        for prefix in prefixes.values():
            create_topics(KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix))
        args = ("--limit", str(budget), "--speed", f"{speed:g}")
        with sim_backend(work_dir / "sim-backend.log", *args) as backend_url:
            log(f"baseline: dispatcher on empty topics, sampled every {interval_s:g} s for {seconds:g} s")
            baseline = sample_dispatcher(
                "baseline",
                bootstrap,
                prefixes["baseline"],
                backend_url,
                budget=budget,
                seconds=seconds,
                interval_s=interval_s,
                work_dir=work_dir,
            )
            topic = KafkaSettings(
                bootstrap_servers=bootstrap, topic_prefix=prefixes["loaded"]
            ).topics.requests(Tier.LOW)
            log(f"producing {records:,} LOW requests to {topic}")
            briefs = brief_requests(records, "mem", now_ms=wall_ms())
            produce_s = bulk_produce(bootstrap, topic, briefs, log=log)
            log(f"produced in {produce_s:.1f} s; loaded: dispatcher sampled the same way")
            loaded = sample_dispatcher(
                "loaded",
                bootstrap,
                prefixes["loaded"],
                backend_url,
                budget=budget,
                seconds=seconds,
                interval_s=interval_s,
                work_dir=work_dir,
            )
    took = time.monotonic() - started
    document = {
        **run_record("memory", took),
        "records": records,
        "produce_seconds": produce_s,
        "budget": budget,
        "backend_speed": speed,
        "sample_seconds": seconds,
        "sample_interval_s": interval_s,
        "target_mb": TARGET_MB,
        "runs": [
            {
                "label": s.label,
                "max_rss_mb": s.max_mb,
                "median_rss_mb": s.median_mb,
                "samples": len(s.rss_mb),
                "rss_mb": s.rss_mb,
                "seconds_to_assigned": s.seconds_to_assigned,
                "health_at_end": s.health_at_end,
                "low_lag_at_end": s.lag_at_end,
                "low_lag_total": sum(s.lag_at_end.values()),
            }
            for s in (baseline, loaded)
        ],
    }
    markdown = render(document, baseline, loaded)
    publish(out, "memory", document, markdown, indent=2)
    return 0


def render(document: dict[str, Any], baseline: Sampled, loaded: Sampled) -> str:
    passed = verdict(loaded.max_mb < TARGET_MB)
    rows = []
    for s in (baseline, loaded):
        held = s.health_at_end.get("held_by_tier", {})
        rows.append(
            f"| {s.label} | {s.max_mb:.1f} | {s.median_mb:.1f} | {len(s.rss_mb)} "
            f"| {sum(s.lag_at_end.values()):,} | {held.get('LOW', '-')} "
            f"| {s.health_at_end.get('paused_partitions', '-')} |"
        )
    return "\n".join(
        [
            "# Dispatcher memory benchmark",
            "",
            header(document, in_all=False),
            "",
            f"{document['records']:,} LOW requests produced to a fresh topic in "
            f"{document['produce_seconds']:.1f} s; "
            f"one dispatcher (budget {document['budget']}, backend speed {document['backend_speed']:g}, "
            f"schedule pinned to peak) sampled every {document['sample_interval_s']:g} s for "
            f"{document['sample_seconds']:g} s from its start. Baseline: the same on empty topics.",
            "",
            *table(
                "dispatcher | max RSS MB | median RSS MB | samples | LOW lag at end | LOW held in memory "
                "| paused partitions"
            ),
            *rows,
            "",
            f"Target: max RSS with the backlog < {TARGET_MB:.0f} MB: **{passed}** ({loaded.max_mb:.1f} MB; "
            f"{loaded.max_mb - baseline.max_mb:+.1f} MB over the empty baseline).",
            "",
        ]
    )
