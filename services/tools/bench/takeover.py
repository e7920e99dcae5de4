"""`inferq bench takeover`: how long a SIGKILLed dispatcher's partitions go unserved, and whether a
paused but living one keeps them, over repeated runs, for each session setting asked.

Each run, on fresh topics: two dispatchers (local coordination) join; once they own every partition
between them, HIGH requests are produced at a steady `rate`, spread over every partition, to a
simulated backend answering in `backend_latency_ms`. During the first `soak_s` one dispatcher is
frozen once for `pause_ms` (SIGSTOP, then SIGCONT: a process-wide stall such as a long GC pause or a
starved CPU); then it is SIGKILLed, and traffic goes on for `after_s`.

- takeover: from the SIGKILL to the survivor's first dispatch of a request from a partition only
  the victim had served (the results' `dispatched_at_ms`).
- false takeovers: rebalances while both members live (the soak, pause included), counted as
  "partitions revoked" lines the members logged in that window. A frozen member that keeps its
  partitions logs none.
- lost: produced requests with no outcome once traffic stopped and the survivor drained.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from inferq.clock import wall_ms
from inferq.messaging.codec import request_codec, result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceResult
from inferq.messaging.tiers import Tier
from inferq.tools.bench.kafka import bench_broker, chat_requests, fresh_topics, read_topic
from inferq.tools.bench.machine import (
    broker_shape,
    cell,
    header,
    publish,
    run_record,
    table,
)
from inferq.tools.bench.procs import dispatcher_group, every_model_latency, sim_backend, start_group
from inferq.tools.bench.specs import SessionSetting, TakeoverSpec
from inferq.tools.measures import median

Log = Callable[[str], None]
REVOKED = "partitions revoked"
DRAIN_S = 60.0


@dataclass(frozen=True)
class RunResult:
    setting: str
    takeover_s: float | None
    first_outcome_s: float | None
    victim_partitions: int
    false_rebalances: int
    produced: int
    lost: int
    redone: int


class Paced:
    """HIGH requests at `rate_per_s`, partition after partition, in a thread, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_per_s: float, tag: str) -> None:
        self._producer = Producer(
            KafkaSettings(bootstrap_servers=bootstrap).producer_config(client_id="bench-takeover")
        )
        self._topic, self._partitions, self._rate, self._tag = topic, partitions, rate_per_s, tag
        self._stop = threading.Event()
        self.produced = 0
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def _run(self) -> None:
        codec = request_codec()
        started = time.monotonic()
        requests = chat_requests(10_000_000, self._tag, now_ms=wall_ms())
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self._rate) + 1
            while self.produced < due:
                request = next(requests)
                self._producer.produce(
                    self._topic, codec.encode(request), partition=self.produced % self._partitions
                )
                self.produced += 1
            self._producer.poll(0)
            self._stop.wait(0.01)

    def __enter__(self) -> Paced:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)
        self._producer.flush(15.0)


def _revocations(log_path: Path, start: int) -> int:
    """ "partitions revoked" lines in `log_path` past byte `start`."""
    try:
        with log_path.open("rb") as handle:
            handle.seek(start)
            return handle.read().decode(errors="replace").count(REVOKED)
    except OSError:
        return 0


def _results(bootstrap: str, topic: str) -> list[InferenceResult]:
    codec = result_codec()
    return [codec.decode(r.value) for r in read_topic(bootstrap, topic)]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def one_run(
    bootstrap: str, backend_url: str, spec: TakeoverSpec, setting: SessionSetting, work_dir: Path, log: Log
) -> RunResult:
    kafka = fresh_topics(bootstrap, "tko")
    topics = kafka.topics
    prefix = kafka.topic_prefix
    high = next(s.partitions for s in topics.specs() if s.name == topics.requests(Tier.HIGH))
    extra = {"INFERQ_DISPATCHER_SCHEDULE_PIN": "normal", **setting.env(), **spec.dispatcher_env}
    procs, urls = dispatcher_group(kafka, backend_url, 2, budget=spec.budget, extra=extra, log_dir=work_dir)
    victim = procs[0]
    try:
        start_group(procs, urls, kafka)
        marks = [_size(p.log_path) for p in procs]
        with Paced(bootstrap, topics.requests(Tier.HIGH), high, spec.rate_per_s, prefix) as paced:
            time.sleep(spec.soak_s / 2)
            victim.signal(signal.SIGSTOP)
            time.sleep(spec.pause_ms / 1000)
            victim.signal(signal.SIGCONT)
            time.sleep(spec.soak_s / 2)
            false_rebalances = sum(_revocations(p.log_path, m) for p, m in zip(procs, marks, strict=True))
            killed_ms = wall_ms()
            victim.kill()
            time.sleep(spec.after_s)
        produced = paced.produced
        # Until the survivor answered every request produced (bounded): redone ones are on the
        # topic twice, so a count of records would say done too early.
        wanted = {f"{prefix}-{i:06d}" for i in range(produced)}
        deadline = time.monotonic() + DRAIN_S
        results = _results(bootstrap, topics.results)
        while not wanted <= {r.request_id for r in results} and time.monotonic() < deadline:
            time.sleep(1.0)
            results = _results(bootstrap, topics.results)
    finally:
        for proc in procs:
            proc.stop()
    where = {
        request_codec().decode(r.value).request_id: r.partition
        for r in read_topic(bootstrap, topics.requests(Tier.HIGH))
    }
    victim_id, survivor_id = f"{prefix}-d0", f"{prefix}-d1"
    before = [r for r in results if r.completed_at_ms <= killed_ms]
    orphaned = {where[r.request_id] for r in before if r.dispatcher_id == victim_id} - {
        where[r.request_id] for r in before if r.dispatcher_id == survivor_id
    }
    taken = [
        r
        for r in results
        if r.dispatcher_id == survivor_id
        and where.get(r.request_id) in orphaned
        and r.completed_at_ms > killed_ms
    ]
    dispatches = [r.dispatched_at_ms for r in taken if r.dispatched_at_ms is not None]
    answered: dict[str, set[str]] = {}
    for r in results:
        answered.setdefault(r.request_id, set()).add(r.dispatcher_id)
    result = RunResult(
        setting=setting.label,
        takeover_s=(min(dispatches) - killed_ms) / 1000 if dispatches else None,
        first_outcome_s=(min(r.completed_at_ms for r in taken) - killed_ms) / 1000 if taken else None,
        victim_partitions=len(orphaned),
        false_rebalances=false_rebalances,
        produced=produced,
        lost=sum(1 for rid in where if rid not in answered),
        redone=sum(1 for ids in answered.values() if len(ids) > 1),
    )
    log(
        f"[{setting.label}] takeover {result.takeover_s} s (first outcome {result.first_outcome_s} s) of "
        f"{result.victim_partitions} partitions; false rebalances {false_rebalances} (with a "
        f"{spec.pause_ms} ms freeze); produced {produced}, lost {result.lost}, redone {result.redone}"
    )
    return result


def summarize(results: list[RunResult]) -> dict[str, Any]:
    takeovers = [r.takeover_s for r in results]
    known = [t for t in takeovers if t is not None]
    return {
        "runs": len(results),
        "takeover_median_s": median(list(takeovers)),
        "takeover_min_s": min(known, default=None),
        "takeover_max_s": max(known, default=None),
        "first_outcome_median_s": median([r.first_outcome_s for r in results]),
        "runs_without_takeover": sum(1 for t in takeovers if t is None),
        "false_rebalances": sum(r.false_rebalances for r in results),
        "lost": sum(r.lost for r in results),
        "redone_median": median([float(r.redone) for r in results]),
    }


def render(document: dict[str, Any]) -> str:
    spec = document["spec"]
    lines = [
        "# Dispatcher takeover benchmark",
        "",
        header(document, python=False, kafka=broker_shape(spec["cluster"])),
        "",
        f"Two dispatchers, {spec['rate_per_s']:g} HIGH requests/s over every HIGH partition, backend "
        f"{spec['backend_latency_ms']:g} ms per call. Each run: {spec['soak_s']:g} s with both alive, one "
        f"frozen for {spec['pause_ms']} ms (SIGSTOP/SIGCONT) half way; then SIGKILL, {spec['after_s']:g} s "
        "more traffic. Takeover: SIGKILL to the survivor's first dispatch from a partition only the victim "
        "had served. False rebalances: rebalances while both lived (the freeze included).",
        "",
        *table(
            "setting | runs | takeover median | min | max | first outcome median | no takeover seen "
            "| false rebalances | lost | redone (median)"
        ),
    ]
    for label, s in document["summary"].items():
        lines.append(
            f"| {label} | {s['runs']} | {cell(s['takeover_median_s'], '.2f')} s "
            f"| {cell(s['takeover_min_s'], '.2f')} s "
            f"| {cell(s['takeover_max_s'], '.2f')} s | {cell(s['first_outcome_median_s'], '.2f')} s "
            f"| {s['runs_without_takeover']} | {s['false_rebalances']} | {s['lost']} "
            f"| {cell(s['redone_median'], '.0f')} |"
        )
    lines += [
        "",
        "## Per run",
        "",
        *table(
            "setting | takeover | first outcome | partitions | false rebalances | produced | lost | redone"
        ),
    ]
    for r in document["runs"]:
        lines.append(
            f"| {r['setting']} | {cell(r['takeover_s'], '.2f')} | {cell(r['first_outcome_s'], '.2f')} "
            f"| {r['victim_partitions']} | {r['false_rebalances']} | {r['produced']} | {r['lost']} "
            f"| {r['redone']} |"
        )
    return "\n".join(lines) + "\n"


def run(spec: TakeoverSpec, *, out: Path, home: Path) -> int:
    log = print
    started = time.monotonic()
    work_dir = home / f"takeover-{uuid.uuid4().hex[:6]}"
    results: list[RunResult] = []
    with bench_broker(home, log, cluster=spec.cluster) as bootstrap:
        latency = every_model_latency(spec.backend_latency_ms / 1000)
        args = ("--limit", str(2 * spec.budget), *latency)
        with sim_backend(work_dir / "sim-backend.log", *args) as backend_url:
            for index in range(spec.runs):
                for setting in spec.settings:
                    log(f"run {index + 1} of {spec.runs}, {setting.label}")
                    results.append(one_run(bootstrap, backend_url, spec, setting, work_dir, log))
    document = {
        **run_record("takeover", time.monotonic() - started),
        "spec": asdict(spec),
        "summary": {s.label: summarize([r for r in results if r.setting == s.label]) for s in spec.settings},
        "runs": [asdict(r) for r in results],
    }
    markdown = render(document)
    publish(out, "takeover", document, markdown, indent=1)
    return 0 if all(r.lost == 0 for r in results) else 1
