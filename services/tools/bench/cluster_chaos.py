"""`inferq bench cluster-chaos`: what each broker fault costs on a three-node cluster under traffic.

Runs the faults of `inferq.tools.chaos.cluster_faults` (SIGKILL the leader of a request partition,
SIGKILL the active controller, a rolling restart) `runs` times each, every time on a fresh pipeline,
on one cluster the bench starts (512 MB of heap per node) and stops. Per case: accepted requests
lost and outcomes seen twice by callers (goal 0 for both), ingest's refusals (503) and their
longest run, how long throughput took to recover and the longest time without a completion.
Results: ``bench-results/cluster-chaos.{json,md}``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inferq.tools.bench.kafka import CLUSTER_HEAP
from inferq.tools.bench.machine import cell, header, publish, run_record, table
from inferq.tools.broker.ephemeral import cluster_on_free_ports
from inferq.tools.chaos.cluster_faults import CaseReport, CaseSpec, Fault, run_case
from inferq.tools.chaos.figures import BASELINE_S, RECOVERED_SHARE, WINDOW_S
from inferq.tools.measures import median


def case_row(report: CaseReport) -> dict[str, Any]:
    a, r = report.account, report.refusals
    return {
        "fault": str(report.fault),
        "nodes": [e.node for e in report.events],
        "submitted": report.submitted,
        "accepted": a.accepted,
        "lost": len(a.lost),
        "lost_ids": a.lost[:20],
        "caller_duplicates": a.caller_duplicates,
        "absorbed_duplicates": a.absorbed,
        "statuses": a.statuses,
        "refused": r.by_status,
        "refused_total": r.total,
        "longest_refusal_run": r.longest_run,
        "longest_refusal_run_s": r.longest_run_s,
        "recovered_s": report.recovered_s,
        "recoveries": [asdict(x) for x in report.recoveries],
        "longest_gap_s": max((x.longest_gap_s for x in report.recoveries), default=0.0),
        "node_back_s": [(e.back_ms - e.at_ms) / 1000 for e in report.events],
        "replicated_s": [(e.replicated_ms - e.at_ms) / 1000 for e in report.events],
        "services_alive": report.services_alive,
        "exit_codes": report.exit_codes,
        "by_dispatcher": a.by_dispatcher,
        "seconds": report.seconds,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(rows),
        "lost": sum(r["lost"] for r in rows),
        "caller_duplicates": sum(r["caller_duplicates"] for r in rows),
        "absorbed_median": median([float(r["absorbed_duplicates"]) for r in rows]),
        "refused_median": median([float(r["refused_total"]) for r in rows]),
        "longest_run_median": median([float(r["longest_refusal_run"]) for r in rows]),
        "longest_run_s_median": median([r["longest_refusal_run_s"] for r in rows]),
        "recovered_s_median": median([r["recovered_s"] for r in rows]),
        "recovered_s_max": max(
            (r["recovered_s"] for r in rows if r["recovered_s"] is not None), default=None
        ),
        "not_recovered": sum(1 for r in rows if r["recovered_s"] is None),
        "longest_gap_s_median": median([r["longest_gap_s"] for r in rows]),
        "accepted_median": median([float(r["accepted"]) for r in rows]),
    }


def render(document: dict[str, Any]) -> str:
    spec = document["spec"]
    lines = [
        "# Broker faults on a three-node cluster",
        "",
        header(
            document,
            python=False,
            kafka=f", three combined broker+controller nodes ({CLUSTER_HEAP} heap each)",
        ),
        "",
        f"Each case on a fresh pipeline (ingest, results, {spec['dispatchers']} dispatchers, simulated "
        f"backend at 10x speed), topics with replication factor 3 and min.insync.replicas=2. Traffic: "
        f"{spec['threads']} submitters, one request each every {spec['interval_s']:g} s after the answer "
        f"(half chat, half analysis, deadlines 3 min). {spec['warmup_s']:g} s of traffic, then the fault; "
        f"a killed node stays down {spec['down_s']:g} s, then is started and every partition fully "
        f"replicated again; {spec['after_s']:g} s more traffic. Refused: ingest's answers other than 202 "
        "(503: the write was not acknowledged within ingest's produce timeout, 5 s), longest run: "
        "consecutive refusals in sending order. Recovered: from the fault to the end of the first "
        f"{WINDOW_S:g} s window back at {RECOVERED_SHARE:.0%} of the {BASELINE_S:g} s before it, once a "
        "window fell below (0: no window fell below; for a rolling restart the slowest of its three).",
        "",
        *table(
            "case | runs | accepted (median) | lost | caller-visible duplicates | absorbed by the store "
            "(median) | refused (median) | longest run (median) | its duration | recovered after (median) "
            "| max | longest gap without a completion (median)"
        ),
    ]
    for fault, s in document["summary"].items():
        lines.append(
            f"| {fault} | {s['runs']} | {cell(s['accepted_median'], '.0f')} | {s['lost']} "
            f"| {s['caller_duplicates']} | {cell(s['absorbed_median'], '.0f')} "
            f"| {cell(s['refused_median'], '.0f')} | {cell(s['longest_run_median'], '.0f')} "
            f"| {cell(s['longest_run_s_median'])} s | {cell(s['recovered_s_median'])} s "
            f"| {cell(s['recovered_s_max'])} s | {cell(s['longest_gap_s_median'])} s |"
        )
    lines += [
        "",
        "## Per run",
        "",
        *table(
            "case | nodes | accepted | lost | duplicates (callers / absorbed) | refused | longest run "
            "| recovered | longest gap | node back after | replicated after"
        ),
    ]
    for r in document["rows"]:
        lines.append(
            f"| {r['fault']} | {r['nodes']} | {r['accepted']} | {r['lost']} | {r['caller_duplicates']} / "
            f"{r['absorbed_duplicates']} | {r['refused'] or 0} | {r['longest_refusal_run']} "
            f"({r['longest_refusal_run_s']:.1f} s) | {cell(r['recovered_s'])} s | {r['longest_gap_s']:.1f} s "
            f"| {', '.join(f'{x:.0f}' for x in r['node_back_s'])} s "
            f"| {', '.join(f'{x:.0f}' for x in r['replicated_s'])} s |"
        )
    return "\n".join(lines) + "\n"


def run(spec: CaseSpec, faults: list[Fault], *, runs: int, out: Path, home: Path) -> int:
    log = print
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    work = home / f"cluster-chaos-{uuid.uuid4().hex[:6]}"
    with cluster_on_free_ports(home, nodes=3, heap=CLUSTER_HEAP) as cluster:
        log(f"cluster up at {cluster.bootstrap} in {time.monotonic() - started:.0f} s")
        for index in range(runs):
            for fault in faults:
                log(f"run {index + 1} of {runs}: {fault}")
                report = run_case(cluster, fault, work / f"{fault}-{index + 1}", spec, log)
                rows.append(case_row(report))
    document = {
        **run_record("cluster-chaos", time.monotonic() - started),
        "spec": asdict(spec),
        "summary": {str(f): summarize([r for r in rows if r["fault"] == str(f)]) for f in faults},
        "rows": rows,
    }
    markdown = render(document)
    publish(out, "cluster-chaos", document, markdown, indent=1)
    clean = all(r["lost"] == 0 and r["caller_duplicates"] == 0 for r in rows)
    return 0 if clean else 1
