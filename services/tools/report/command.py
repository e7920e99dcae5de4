"""`inferq report`: a recorded run (or several, or simulations) as a table, JSON and PNG plots.

Output folder (default `<runs-dir>/<RUN_ID>/report/`, or `report-<TENANT>/` with `--tenant`):
`report.json` (every run's document), `results-<run_id>.jsonl` (the results read from Kafka, without
their output text; usable as `inferq simulate --latency-from`), `queue_wait.png`,
`tokens_in_use.png`, `backlog.png`. With `--tenant`, all of it is that tenant's part of each run.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceResult
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.documents import (
    RunDocument,
    load_documents,
    write_documents,
)
from inferq.tools.report.effective import attach_effective_budget
from inferq.tools.report.errors import ReportError
from inferq.tools.report.plots import write_plots
from inferq.tools.report.preemption import (
    attach_preemption,
    preemption_by_tier,
    preemption_of,
    read_pages,
    render_preemption,
)
from inferq.tools.report.results_source import ResultsRead, read_results
from inferq.tools.report.stats import request_counts
from inferq.tools.report.table import render
from inferq.tools.report.tenants import describe_tenants, document_of_tenant, tenant_counts
from inferq.tools.traces.errors import TraceError
from inferq.tools.traces.files import load_trace


def is_document(item: str) -> bool:
    return item.endswith(".json") and Path(item).is_file()


def default_out(first: str, runs_dir: Path, tenant: str | None = None) -> Path:
    name = "report" if tenant is None else f"report-{tenant}"
    if is_document(first):
        path = Path(first)
        return path.with_name(f"{path.stem}-{name}")
    return runs_dir / first / name


def run_document(
    run_id: str, results: list[InferenceResult], budget: int, runs_dir: Path, tenant: str | None = None
) -> RunDocument:
    """A recorded run: its results, and its request records when the load generator left them.
    With `tenant`, `results` are that tenant's and so are the request records counted."""
    outcomes = [MeasuredRequest.from_result(r) for r in results]
    requests_path = runs_dir / run_id / "requests.jsonl"
    requests = None
    if requests_path.is_file():
        trace = load_trace(requests_path, start_ms=0, tenant=tenant)
        if trace.without_tenant:
            print(
                f"note: {requests_path} has {trace.without_tenant} records naming no tenant "
                "(written before records carried one): requests sent and accepted are not counted"
            )
        else:
            requests = request_counts(trace, outcomes)
    params: dict[str, object] = {"requests_file": str(requests_path) if requests is not None else None}
    if tenant is not None:
        params["tenant"] = tenant
    return RunDocument(
        kind="run", name=run_id, budget=budget, outcomes=outcomes, requests=requests, params=params
    )


def write_results(path: Path, results: Sequence[InferenceResult]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for result in results:
            # The answer text is the caller's data and can be large; timings are what we analyse.
            out.write(json.dumps({k: v for k, v in result.to_record().items() if k != "output"}) + "\n")


def collect(args: argparse.Namespace, items: Sequence[str], out: Path) -> list[RunDocument]:
    tenant: str | None = args.tenant
    run_ids = [item for item in items if not is_document(item)]
    read: ResultsRead | None = None
    if run_ids:
        settings = KafkaSettings(bootstrap_servers=args.bootstrap, topic_prefix=args.topic_prefix)
        read = read_results(settings, run_ids, timeout_s=args.timeout)
        print(
            f"read {read.scanned} records of {settings.topics.results}: "
            + ", ".join(f"{r} {len(read.by_run[r])}" for r in run_ids)
            + f" (duplicates dropped {read.duplicates}, undecodable {read.undecodable})"
        )
        empty = [r for r in run_ids if not read.by_run[r]]
        if empty:
            raise ReportError(f"no results for run {', '.join(empty)} on {settings.topics.results}")
        for run_id in run_ids:
            counts = tenant_counts(MeasuredRequest.from_result(r) for r in read.by_run[run_id])
            print(f"tenants of {run_id}: {describe_tenants(counts)}")
            if tenant is not None and tenant not in counts:
                raise ReportError(f"no results of tenant {tenant!r} for run {run_id}")
    docs: list[RunDocument] = []
    for item in items:
        if read is not None and item in read.by_run:
            results = [r for r in read.by_run[item] if tenant is None or r.tenant == tenant]
            docs.append(run_document(item, results, args.budget, args.runs_dir, tenant))
            write_results(out / f"results-{item}.jsonl", results)
        else:
            for doc in load_documents(Path(item)):
                if tenant is not None:
                    doc = document_of_tenant(doc, tenant)
                    if not doc.outcomes:
                        raise ReportError(f"no outcomes of tenant {tenant!r} in {item} ({doc.name})")
                docs.append(doc)
    return docs


def run_report(args: argparse.Namespace) -> int:
    if args.budget is None:
        try:
            args.budget = int(os.environ.get("INFERQ_BUDGET") or 10)
        except ValueError:
            print(f"error: INFERQ_BUDGET is not a number: {os.environ['INFERQ_BUDGET']!r}")
            return 2
    items = [args.run_id, *args.compare]
    out: Path = args.out or default_out(args.run_id, args.runs_dir, args.tenant)
    try:
        docs = collect(args, items, out)
    except (ReportError, TraceError) as exc:
        print(f"error: {exc}")
        return 1
    if args.tenant is not None:
        print(f"tenant {args.tenant} only: its waits, outcomes and tokens in use (of the whole budget)")
    print(render([(doc.name, doc.summary()) for doc in docs]))
    for note in [*attach_effective_budget(docs, args.prometheus), *attach_preemption(docs, args.prometheus)]:
        print(f"note: {note}")
    for doc in docs:
        kept = preemption_of(doc.params)
        if kept is not None:
            print(f"\n{doc.name}, over the run (Prometheus):\n{render_preemption(kept)}")
    if args.metrics:
        try:
            preemption = preemption_by_tier(read_pages(args.metrics))
        except ReportError as exc:
            print(f"error: {exc}")
            return 1
        print(
            "\n"
            + (render_preemption(preemption) if preemption else "preemption: none counted by these pages")
        )
    write_documents(out / "report.json", docs)
    plots = write_plots(docs, out)
    print(f"\nwrote {out / 'report.json'}, " + ", ".join(p.name for p in plots))
    return 0
