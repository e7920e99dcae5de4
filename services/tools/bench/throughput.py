"""`inferq bench throughput`: requests/s through the dispatcher on a zero-latency backend, against a
bare loop and the backend alone, and with tracing on against off, in the same run.

One simulated backend serves the whole invocation (every model at zero latency, limit = the budget,
so a group that exceeded its budget would be answered 429 and show it). Each run measures, each on
fresh topics and fresh processes:

- inferq, N dispatchers (one consumer group, local coordination, budget / N each so the group holds
  the budget): the members start on empty topics and the bench waits until they own every partition
  between them (a rebalance mid-run would measure the group protocol), then `records` HIGH requests
  are bulk-loaded into the HIGH topic (about 0.1 s for 5,000, far faster than they are served).
  Rate = (results - 1) / (last result - first result), from the results' Kafka timestamps.
- the bare loop (`bareloop.py loop`), on its own pre-loaded topic, measured the same way.
- the backend alone (`bareloop.py blast`): `records` calls straight at it, `budget` at a time, with
  aiohttp.

- inferq, 1 dispatcher with tracing on: the same single dispatcher with 100% sampling and the OTLP
  exporter (``OTEL_EXPORTER_OTLP_ENDPOINT``) sending to a receiver this bench runs
  (`inferq.tools.otlp_sink`); the spans received are counted once the dispatcher has exited
  (its exporter flushes then). Once more with 10% of the traces sampled
  (`parentbased_traceidratio`), what an operator who cannot pay for every trace would run. Tracing
  off is the plain measurement above; what its hooks cost is measured apart (`tracing_cost.py`),
  since no run can hold the hooks out.

The order of the first three alternates between runs. `--profile` adds one single-dispatcher measurement
under cProfile (not in the medians) and writes its top functions.
"""

from __future__ import annotations

import json
import pstats
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from inferq.clock import wall_ms
from inferq.messaging.codec import result_codec
from inferq.messaging.tiers import Tier
from inferq.tools.bench.cpu import CpuWindow
from inferq.tools.bench.kafka import (
    RecordCounter,
    bench_broker,
    bulk_produce,
    chat_requests,
    fresh_topics,
    read_topic,
)
from inferq.tools.bench.machine import (
    TARGET_HEAD,
    broker_shape,
    cell,
    header,
    publish,
    results_dir,
    run_record,
    table,
)
from inferq.tools.bench.procs import (
    dispatcher_group,
    every_model_latency,
    health,
    sim_backend,
    start_group,
    wait_exit,
)
from inferq.tools.bench.specs import ThroughputSpec
from inferq.tools.bench.throughput_report import (
    BACKEND,
    BARE,
    SAMPLED_SHARE,
    TRACED,
    TRACED_SAMPLED,
    Measurement,
    dispatchers_label,
    rate_per_s,
    rates_table,
    target_rows,
    tracing_rows,
)
from inferq.tools.bench.tracing_cost import tracing_off_cost
from inferq.tools.measures import median
from inferq.tools.otlp_sink import OtlpSink
from inferq.tools.stack.process import ServiceProcess

Log = Callable[[str], None]
# ("group", size) | ("traced" | "sampled", 1) | ("bare", 0) | ("backend", 0)
Step = tuple[str, int]
PROFILE_TOP = 30


@dataclass
class Bench:
    bootstrap: str
    backend_url: str
    spec: ThroughputSpec
    work_dir: Path
    log: Log

    def reset_backend(self) -> None:
        httpx.post(f"{self.backend_url}/admin/reset", timeout=5.0).raise_for_status()

    def backend_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(f"{self.backend_url}/stats", timeout=5.0).json()
        return {k: stats[k] for k in ("max_in_flight", "total", "by_status")}

    def _results(self, topic: str) -> tuple[list[int], dict[str, int], int]:
        """First result per request_id: its Kafka timestamp; results per writer; duplicates."""
        codec = result_codec()
        first: dict[str, int] = {}
        writers: dict[str, int] = {}
        duplicates = 0
        for read in read_topic(self.bootstrap, topic):
            result = codec.decode(read.value)
            if result.request_id in first:
                duplicates += 1
                continue
            first[result.request_id] = read.timestamp_ms
            writers[result.dispatcher_id] = writers.get(result.dispatcher_id, 0) + 1
        return list(first.values()), writers, duplicates

    def group(
        self,
        size: int,
        run: str,
        *,
        profile: Path | None = None,
        sink: OtlpSink | None = None,
        sampled: float = 1.0,
    ) -> tuple[Measurement, dict[str, Any]]:
        """`size` dispatchers; with `sink`, traced: the `sampled` share of the traces exported to it
        over OTLP/HTTP."""
        kafka = fresh_topics(self.bootstrap, f"thr-{run}-x{size}{'-traced' if sink else ''}")
        prefix = kafka.topic_prefix
        topics = kafka.topics
        per_member = max(1, self.spec.budget // size)
        extra = {
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "peak",
            **self.spec.dispatcher_env,
            **_tracing_env(sink, sampled),
        }
        procs, urls = dispatcher_group(
            kafka,
            self.backend_url,
            size,
            budget=per_member,
            extra=extra,
            log_dir=self.work_dir,
            profile=profile,
        )
        self.reset_backend()
        budgets: set[int] = set()
        spans_before = sink.count() if sink is not None else 0
        try:
            stable_s = start_group(procs, urls, kafka)
            # The dispatchers' own CPU time while they serve: requests per CPU-second is the figure
            # that scales on a machine with more cores than this one.
            window = CpuWindow({proc.name: proc.pid for proc in procs})
            window.start()
            load_s = self._load(topics.requests(Tier.HIGH), prefix)
            with RecordCounter(self.bootstrap, topics.results) as counter:
                deadline = time.monotonic() + self.spec.bound_s
                while counter.count() < self.spec.records and time.monotonic() < deadline:
                    for url in urls:
                        budget = health(url).get("effective_budget")
                        if isinstance(budget, int):
                            budgets.add(budget)
                    time.sleep(0.5)
            cpu = window.stop()
        finally:
            codes = [proc.stop() for proc in procs]
        stamps, writers, duplicates = self._results(topics.results)
        label = dispatchers_label(size) if sink is None else (TRACED if sampled == 1 else TRACED_SAMPLED)
        measured = Measurement(label, len(stamps), _span_s(stamps), rate_per_s(stamps))
        detail = {
            "what": label,
            # Exported by the dispatcher (flushed at its exit); None: tracing off.
            "spans_received": sink.count() - spans_before if sink is not None else None,
            "topic_prefix": prefix,
            "budget_per_member": per_member,
            "group_stable_after_s": stable_s,
            "load_seconds": load_s,
            "results_by_dispatcher": writers,
            "duplicates": duplicates,
            "effective_budgets_seen": sorted(budgets),
            "dispatcher_cpu_s": round(sum(cpu.by_process_s.values()), 2),
            "cpu_by_dispatcher_s": cpu.by_process_s,
            "results_per_dispatcher_cpu_s": len(stamps) / sum(cpu.by_process_s.values())
            if sum(cpu.by_process_s.values()) > 0
            else None,
            "machine_busy_s": round(cpu.machine_busy_s, 2),
            "window_s": round(cpu.wall_s, 2),
            "exit_codes": codes,
            "backend": self.backend_stats(),
        }
        self.log(f"[{run}] {label}: {_fmt(measured)}, load {load_s:.2f} s")
        return measured, detail

    def _load(self, topic: str, tag: str) -> float:
        chats = chat_requests(self.spec.records, tag, now_ms=wall_ms())
        return bulk_produce(self.bootstrap, topic, chats)

    def bare_loop(self, run: str) -> tuple[Measurement, dict[str, Any]]:
        kafka = fresh_topics(self.bootstrap, f"thr-{run}-bare")
        topics = kafka.topics
        load_s = self._load(topics.requests(Tier.HIGH), kafka.topic_prefix)
        summary_path = self.work_dir / kafka.topic_prefix / "bareloop.json"
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        args = ["bench", "bareloop", "loop", "--bootstrap", self.bootstrap]
        args += ["--source-topic", topics.requests(Tier.HIGH), "--result-topic", topics.results]
        args += ["--group", f"{kafka.topic_prefix}-bare", "--backend-url", f"{self.backend_url}/v1"]
        args += ["--concurrency", str(self.spec.budget), "--count", str(self.spec.records)]
        args += ["--summary", str(summary_path), "--timeout", str(self.spec.bound_s)]
        self.reset_backend()
        proc = ServiceProcess("bareloop", args, summary_path.parent / "bareloop.log")
        proc.start()
        code = wait_exit(proc, self.spec.bound_s + 30.0)
        stamps, _, duplicates = self._results(topics.results)
        measured = Measurement(BARE, len(stamps), _span_s(stamps), rate_per_s(stamps))
        summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.exists() else {}
        self.log(f"[{run}] {BARE}: {_fmt(measured)}")
        return measured, {
            "what": BARE,
            "topic_prefix": kafka.topic_prefix,
            "load_seconds": load_s,
            "exit_code": code,
            "duplicates": duplicates,
            "own_summary": summary,
            "backend": self.backend_stats(),
        }

    def backend_alone(self, run: str) -> tuple[Measurement, dict[str, Any]]:
        """`records` calls straight at the backend, `budget` at a time, with aiohttp: its ceiling."""
        summary_path = self.work_dir / f"blast-{run}-{uuid.uuid4().hex[:6]}.json"
        args = ["bench", "bareloop", "blast", "--backend-url", f"{self.backend_url}/v1"]
        args += ["--concurrency", str(self.spec.budget), "--count", str(self.spec.records)]
        args += ["--summary", str(summary_path), "--timeout", str(self.spec.bound_s)]
        self.reset_backend()
        proc = ServiceProcess("blast", args, summary_path.with_suffix(".log"))
        proc.start()
        code = wait_exit(proc, self.spec.bound_s + 30.0)
        summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.exists() else {}
        first, last = summary.get("first_ns"), summary.get("last_ns")
        seconds = (last - first) / 1e9 if first is not None and last is not None else None
        measured = Measurement(BACKEND, int(summary.get("done", 0)), seconds, summary.get("rate_per_s"))
        self.log(f"[{run}] {BACKEND}: {_fmt(measured)}")
        return measured, {
            "what": BACKEND,
            "calls": self.spec.records,
            "exit_code": code,
            "own_summary": summary,
            "backend": self.backend_stats(),
        }


def _tracing_env(sink: OtlpSink | None, sampled: float) -> dict[str, str]:
    """The standard OpenTelemetry variables a user sets to export to an OTLP collector: every trace,
    or the `sampled` share of them (a new trace's sampling decided by its trace id, as usual)."""
    if sink is None:
        return {}
    if sampled == 1:
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint, "OTEL_TRACES_SAMPLER": "always_on"}
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": str(sampled),
    }


def _changes(spec: dict[str, Any]) -> list[str]:
    """What differs from the dispatcher as it ships, said before the numbers it changes."""
    changes = [f"`{name}={value}`" for name, value in spec["dispatcher_env"].items()]
    if not changes:
        return []
    return [f"**Experiment, not the shipped configuration:** dispatchers run with {', '.join(changes)}.", ""]


def _span_s(stamps: list[int]) -> float | None:
    return (max(stamps) - min(stamps)) / 1000 if len(stamps) > 1 else None


def _fmt(m: Measurement) -> str:
    rate = "-" if m.rate_per_s is None else f"{m.rate_per_s:,.0f}/s"
    return f"{m.count} in {m.seconds or 0:.2f} s = {rate}"


def top_functions(path: Path, key: str, limit: int = PROFILE_TOP) -> list[dict[str, Any]]:
    """The profile's top functions by `key` ("tottime" or "cumtime"), with their share of the total."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in raw.values()) or 1.0
    rows = sorted(raw.items(), key=lambda item: item[1][2] if key == "tottime" else item[1][3], reverse=True)
    top: list[dict[str, Any]] = []
    for (file, line, func), (_, calls, tt, ct, _) in rows[:limit]:
        short = file.split("site-packages/")[-1].split("/work/main/")[-1]
        top.append(
            {
                "function": f"{short}:{line}({func})",
                "calls": calls,
                "tottime": tt,
                "cumtime": ct,
                "share_of_total": tt / total,
            }
        )
    return [*top, {"total_s": total}]


def run(spec: ThroughputSpec, *, out: Path, home: Path) -> int:
    log = print
    started = time.monotonic()
    work_dir = home / f"throughput-{uuid.uuid4().hex[:6]}"
    runs: list[dict[str, Measurement]] = []
    details: list[list[dict[str, Any]]] = []
    profile: dict[str, Any] | None = None
    hooks = tracing_off_cost() if spec.tracing else None
    with bench_broker(home, log, cluster=spec.cluster) as bootstrap, OtlpSink(keep=False) as sink:
        args = ("--limit", str(spec.budget), *every_model_latency(0))
        with sim_backend(work_dir / "sim-backend.log", *args) as backend_url:
            bench = Bench(bootstrap, backend_url, spec, work_dir, log)
            for index in range(spec.runs):
                name = f"run{index + 1}"
                # Alternated, so neither the dispatcher nor the bare loop always runs on a fresher machine.
                traced: list[Step] = [("traced", 1), ("sampled", 1)] if spec.tracing else []
                first: list[Step] = [("group", 1), *traced, ("bare", 0)]
                steps = (first if index % 2 == 0 else first[::-1]) + [
                    *(("group", size) for size in spec.group_sizes if size != 1),
                    ("backend", 0),
                ]
                measured: dict[str, Measurement] = {}
                run_details: list[dict[str, Any]] = []
                for kind, size in steps:
                    if kind == "group":
                        m, d = bench.group(size, name)
                    elif kind == "traced":
                        m, d = bench.group(size, name, sink=sink)
                    elif kind == "sampled":
                        m, d = bench.group(size, name, sink=sink, sampled=SAMPLED_SHARE)
                    elif kind == "bare":
                        m, d = bench.bare_loop(name)
                    else:
                        m, d = bench.backend_alone(name)
                    measured[m.what] = m
                    run_details.append(d)
                runs.append(measured)
                details.append(run_details)
            if spec.profile:
                path = results_dir(out) / "throughput-dispatcher.prof"
                m, d = bench.group(1, "profiled", profile=path)
                profile = {
                    "measurement": asdict(m),
                    "detail": d,
                    "stats_file": str(path),
                    "by_tottime": top_functions(path, "tottime"),
                    "by_cumtime": top_functions(path, "cumtime"),
                }
    took = time.monotonic() - started
    order = [dispatchers_label(1), *([TRACED, TRACED_SAMPLED] if spec.tracing else [])]
    order += [dispatchers_label(n) for n in spec.group_sizes if n != 1] + [BARE, BACKEND]
    document = {
        **run_record("throughput", took),
        "spec": asdict(spec),
        "targets": target_rows(runs) + tracing_rows(runs, hooks),
        "tracing_off_hooks": hooks,
        "runs": [
            {"measurements": {k: asdict(v) for k, v in r.items()}, "details": d}
            for r, d in zip(runs, details, strict=True)
        ],
        "profile": profile,
    }
    markdown = render(document, runs, order)
    publish(out, "throughput", document, markdown, indent=1)
    complete = all(m.count >= spec.records for r in runs for m in r.values())
    return 0 if complete else 1


def scaling_rows(document: dict[str, Any]) -> list[str]:
    """Per group size: median results/s, the dispatchers' CPU seconds and results per CPU-second."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in document["runs"]:
        for d in run["details"]:
            if (
                d.get("dispatcher_cpu_s") is not None
                and d["what"].startswith("inferq,")
                and "tracing" not in d["what"]
            ):
                rate = run["measurements"][d["what"]]["rate_per_s"]
                groups.setdefault(d["what"], []).append(d | {"rate_per_s": rate})
    if not groups:
        return []
    lines = [
        "",
        "## Scaling: the dispatcher group's throughput and its CPU cost",
        "",
        "Dispatcher CPU: the members' own user+system seconds from the load to the last result "
        "(/proc); on two cores shared with the broker, the simulated backend and the bench, the "
        "absolute rate is bounded by the cores, so requests per dispatcher CPU-second is the figure "
        "that carries to a bigger machine.",
        "",
        *table(
            "group | runs | results/s (median) | dispatcher CPU s (median) | results per dispatcher "
            "CPU-second (median) | machine busy s (median)"
        ),
    ]
    for what, rows in groups.items():
        per_cpu = median(r["results_per_dispatcher_cpu_s"] or None for r in rows)
        lines.append(
            f"| {what} | {len(rows)} | {cell(median(r['rate_per_s'] for r in rows), ',.0f')} "
            f"| {cell(median(r['dispatcher_cpu_s'] for r in rows))} | {cell(per_cpu, ',.0f')} "
            f"| {cell(median(r['machine_busy_s'] for r in rows))} |"
        )
    return lines


def render(document: dict[str, Any], runs: list[dict[str, Measurement]], order: list[str]) -> str:
    spec = document["spec"]
    labels = [f"run {i + 1}" for i in range(len(runs))]
    lines = [
        "# Throughput benchmark",
        "",
        header(document, kafka=broker_shape(spec.get("cluster"))),
        "",
        f"{spec['records']:,} HIGH requests per measurement; budget {spec['budget']} (split evenly across a "
        "group); simulated backend at zero latency, limit = budget. Requests/s from the first result to "
        "the last (Kafka timestamps of the results); the backend alone from its first answer to its last.",
        "",
        *_changes(spec),
        rates_table(runs, labels, order),
        "",
        *table(TARGET_HEAD, document["targets"]),
        "",
        "## Per measurement",
        "",
        *table(
            "run | configuration | results | seconds | duplicates | by writer | effective budgets | backend "
            "max in flight | backend answers | spans exported"
        ),
    ]
    for label, run in zip(labels, document["runs"], strict=True):
        for d in run["details"]:
            meas = run["measurements"][d["what"]]
            lines.append(
                f"| {label} | {d['what']} | {meas['count']} | "
                f"{cell(meas['seconds'], '.2f')} | {d.get('duplicates', '-')} "
                f"| {d.get('results_by_dispatcher', '-')} | {d.get('effective_budgets_seen', '-')} "
                f"| {d['backend']['max_in_flight']} | {d['backend']['by_status']} "
                f"| {d.get('spans_received') if d.get('spans_received') is not None else '-'} |"
            )
    lines += scaling_rows(document)
    hooks = document.get("tracing_off_hooks")
    if hooks:
        lines += [
            "",
            "## Tracing off: what the hooks cost",
            "",
            f"A request's tracing hooks with tracing off (the header check at intake, the flag checks "
            f"around the call and the backend call, the outcome's annotation), timed in process: "
            f"{hooks['ns_per_request']:,.0f} ns per request against "
            f"{hooks['baseline_ns_per_request']:,.0f} ns for the same awaits without them "
            f"({hooks['iterations']:,} iterations, best of "
            f"{hooks['repeats']}).",
        ]
    profile = document.get("profile")
    if profile:
        lines += ["", "## Profile of one dispatcher (cProfile, event-loop thread)", ""]
        meas = profile["measurement"]
        lines += [
            f"Under the profiler: {meas['count']} results at "
            f"{cell(meas['rate_per_s'], ',.0f')}/s. Stats in "
            f"`{profile['stats_file']}` (`python -m pstats`).",
            "",
            *table("function | calls | own s | share of own time | cumulative s"),
        ]
        for row in profile["by_tottime"][:-1]:
            lines.append(
                f"| `{row['function']}` | {row['calls']} | {row['tottime']:.2f} | "
                f"{row['share_of_total']:.1%} | {row['cumtime']:.2f} |"
            )
    return "\n".join(lines) + "\n"
