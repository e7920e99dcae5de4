"""`inferq bench scheduling`: every policy on the same compressed evening peak; tables and targets.

The trace is `infra/scenarios/bench/scheduling.toml` rescaled to the options (`scenarios`),
generated once by the one trace generator, then replayed identically for every policy
(`scheduling_run`), each beside the simulator's prediction. Writes `<out>/scheduling.json` (every
number, the trace, the machine) and `<out>/scheduling.md` (the tables with a PASS/MISS column per
target), and prints the markdown.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.bench.kafka import bench_broker
from inferq.tools.bench.machine import header, publish, run_record
from inferq.tools.bench.pipeline_run import BenchConfig
from inferq.tools.bench.scenarios import TraceSpec, describe_scheduling
from inferq.tools.bench.scheduling_report import (
    TOLERANCE_MS,
    comparison_table,
    evaluate,
    makespan_table,
    prediction_targets,
    preemption_table,
    run_table,
    target_table,
    tier_table,
)
from inferq.tools.bench.scheduling_run import Prediction, predict, run_one, run_specs
from inferq.tools.bench.summary import RunSummary
from inferq.tools.traces.generator import generate


def default_timeout_s(spec: TraceSpec) -> float:
    """Generous bound of the wait for every outcome: the trace, plus LOW drained at one slot, x1.5."""
    low_one_slot_s = spec.briefs * DEFAULT_MEAN_LATENCY_S[Tier.LOW] / spec.compress
    return spec.duration_s + 1.5 * low_one_slot_s + 60.0


def run(
    spec: TraceSpec, runs: list[str], *, budget: int, out: Path, home: Path, timeout_s: float | None
) -> int:
    trace = generate(spec.scenario())
    started = time.monotonic()
    log = print
    log(f"trace: {len(trace)} requests over {spec.duration_s:g} s wall clock (S = {spec.compress:g})")
    config = BenchConfig(
        compress=spec.compress,
        budget=budget,
        timeout_s=timeout_s if timeout_s is not None else default_timeout_s(spec),
        work_dir=home,
        log=log,
    )
    specs = run_specs(budget)
    # The simulator's prediction first: well under a second, and it needs nothing but the trace.
    predictions = {name: predict(specs[name], trace, compress=spec.compress, budget=budget) for name in runs}
    for p in predictions.values():
        waits = ", ".join(f"{t.tier.value} {t.wait_ms.mean:.1f}" for t in p.tiers if t.wait_ms is not None)
        log(f"[{p.run}] simulator: mean wait ms {waits}")
    summaries: dict[str, RunSummary] = {}
    raws: list[dict[str, Any]] = []
    with bench_broker(home, log) as bootstrap:
        for name in runs:
            summary, raw = run_one(bootstrap, specs[name], trace, config)
            summaries[name] = summary
            raws.append(raw)
    targets = evaluate(summaries) + prediction_targets(summaries, predictions)
    took = time.monotonic() - started
    document = {
        **run_record("scheduling", took),
        "trace": describe_scheduling(spec, trace),
        "budget": budget,
        "runs": [asdict(s) | {"starved": s.starved()} for s in summaries.values()],
        "predictions": [asdict(p) for p in predictions.values()],
        "run_details": raws,
        "targets": [asdict(t) for t in targets],
    }
    markdown = render(document, summaries, predictions, targets_md=target_table(targets))
    publish(out, "scheduling", document, markdown, indent=2, default=str)
    missing = sum(len(s.missing_ids) for s in summaries.values())
    return 0 if missing == 0 else 1


def render(
    document: dict[str, Any],
    summaries: dict[str, RunSummary],
    predictions: dict[str, Prediction],
    *,
    targets_md: str,
) -> str:
    trace = document["trace"]
    s = trace["spec"]
    counts = ", ".join(f"{k} {v}" for k, v in sorted(trace["counts"].items()))
    return "\n".join(
        [
            "# Scheduling benchmark",
            "",
            header(document),
            "",
            f"Trace (seed {s['seed']}): {trace['total']} requests over {s['duration_s']:g} s of wall clock, "
            f"time compressed S = {s['compress']:g} (= {s['duration_s'] * s['compress'] / 60:g} min of the "
            f"real evening peak): {counts}. Budget B = {document['budget']}, schedule pinned to peak.",
            "",
            "Times are milliseconds of wall clock as measured on the compressed run; the real-time "
            "equivalent columns multiply by S (the pipeline's own overheads, Kafka and HTTP, do not "
            "shrink with S, so those columns overstate them S-fold). Wait = dispatched - enqueued, over "
            "requests that were dispatched; e2e = completed - enqueued, over OK requests.",
            "",
            "## Per run and tier",
            "",
            tier_table(summaries),
            "",
            "## Per run",
            "",
            run_table(summaries),
            "",
            "## Preemption",
            "",
            "`preempt`: the default schedule behind a backend declared preemptible that frees a slot when "
            "its client hangs up (`inferq sim-backend --on-hangup free`, as vLLM, TGI, llama.cpp's server "
            "and SGLang do): MEDIUM and LOW are lent every idle slot, and a lent call is cancelled when a "
            "higher tier needs its slot. `preempt-hosted`: the same declared against a backend that goes "
            "on counting a cancelled call to its end (`--on-hangup keep`, as a hosted API): what "
            "preemption would cost where it must stay off. Preempted: calls cancelled, by the tier that "
            "gave its slot back. Tokens discarded: generated by cancelled calls (the backend's count); "
            "served: generated by calls that ran to their end.",
            "",
            preemption_table(summaries),
            "",
            "## Real pipeline against the simulator",
            "",
            "The simulator (`inferq simulate`'s engine: the dispatcher's own scheduler and read-ahead) "
            "ran the same trace with each run's settings (policy, schedule pinned to peak, LOW ceiling, "
            "compressed deadlines, early drop and promotion age) and the compressed backend latencies, "
            "budget fixed at B. It enqueues each request at its trace offset (the brief dump all at 0) "
            "and fetches instantly. So real - sim is the pipeline's own overhead: ingest's produce, the "
            "Kafka hop and the dispatcher's fetch inside every wait, the backend's HTTP call and the result "
            "path inside every slot's turnover, and the HTTP posting that spreads the dump over seconds "
            "and so shifts who competes with whom. Times in ms of wall clock.",
            "",
            comparison_table(summaries, predictions),
            "",
            makespan_table(summaries, predictions),
            "",
            "## Targets",
            "",
            "The HIGH wait targets are absolute wall-clock figures of the pipeline, so they are compared "
            "with the compressed run's waits as measured (not x S). The last rows hold the real runs to "
            f"the simulator: HIGH and MEDIUM mean waits within {TOLERANCE_MS:.0f} ms of its prediction.",
            "",
            targets_md,
            "",
        ]
    )
