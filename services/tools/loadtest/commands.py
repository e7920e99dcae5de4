"""The composition roots of `loadgen`, `replay` and `trace export`: parsed options in, an exit code out.

Signals only set a stop flag; the run ends in its own loop, flushes what it produced, writes its
records and prints the summary. A second Ctrl-C during that bounded wind-down aborts at once.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from inferq.messaging.admin import require_topics
from inferq.messaging.errors import MessagingError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import Tier
from inferq.tools.loadtest import export, loadgen, replay
from inferq.tools.loadtest.errors import LoadtestError
from inferq.tools.loadtest.progress import ProgressLine, count_line, loadgen_line
from inferq.tools.loadtest.rewrite import Rewriter
from inferq.tools.loadtest.runs import RunWriter, check_run_id, default_out, new_run_id
from inferq.tools.loadtest.senders import HttpSender, KafkaSender, Sender
from inferq.tools.loadtest.source import TopicSource, TraceFileSource
from inferq.tools.loadtest.timerange import TimeRange
from inferq.tools.traces.arrival import Arrival
from inferq.tools.traces.errors import ScenarioError
from inferq.tools.traces.generator import describe, generate
from inferq.tools.traces.scenario import load

EXIT_OK, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 130


def kafka(bootstrap: str | None, prefix: str | None) -> KafkaSettings:
    """The environment's Kafka settings with the options the user typed laid over them."""
    overrides: dict[str, Any] = {}
    if bootstrap:
        overrides["bootstrap_servers"] = bootstrap
    if prefix:
        overrides["topic_prefix"] = prefix
    return KafkaSettings(**overrides)


def _fail(command: str, exc: Exception) -> int:
    print(f"inferq {command}: {exc}", file=sys.stderr)
    return EXIT_ERROR


def run_loadgen(args: argparse.Namespace) -> int:
    try:
        scenario = load(args.scenario)
        run_id = check_run_id(args.run_id or new_run_id())
    except (LoadtestError, ScenarioError, ValueError) as exc:
        return _fail("loadgen", exc)
    trace = generate(scenario, seed=args.seed)[: args.max_requests]
    out: Path = args.out or default_out(run_id)
    options = loadgen.LoadOptions(run_id=run_id, speed=args.speed, max_in_flight=args.max_in_flight)
    settings = kafka(args.bootstrap, args.topic_prefix)
    target = (
        args.ingest_url if args.via == "http" else f"{settings.bootstrap_servers} ({settings.topic_prefix}.*)"
    )
    # --max-requests cuts the trace: it then lasts until its last arrival, not the scenario's end.
    span_s = scenario.duration_s if args.max_requests is None or not trace else trace[-1].offset_ms / 1000
    print(f"run id {run_id}")
    print(
        f"scenario {scenario.name}: {len(trace):,} requests over {span_s:.0f} s, at speed "
        f"{args.speed:g} in {span_s / args.speed:.0f} s, via {args.via} to {target}"
    )
    print(describe(trace))
    if scenario.starts_at:
        print(
            f"it models {scenario.starts_at}: pin the dispatcher's schedule "
            "(INFERQ_DISPATCHER_SCHEDULE_PIN) to match"
        )
    sender: HttpSender | KafkaSender = (
        HttpSender(args.ingest_url, max_connections=args.max_in_flight, timeout_s=args.timeout)
        if args.via == "http"
        else KafkaSender(settings, timeout_s=args.timeout)
    )
    writer = RunWriter(out)
    progress = ProgressLine(sys.stderr)
    try:
        result = asyncio.run(_drive(trace, sender, options, writer, progress))
    except LoadtestError as exc:
        writer.close({"run_id": run_id, "error": str(exc)})
        return _fail("loadgen", exc)
    progress.finish(loadgen_line(result.tally, result.planned, result.elapsed_s))
    meta = {
        "run_id": run_id,
        "scenario": scenario.name,
        "scenario_file": scenario.source,
        "seed": scenario.seed if args.seed is None else args.seed,
        "speed": args.speed,
        "via": args.via,
        "target": target,
        "started_at_ms": result.started_ms,
        "elapsed_s": result.elapsed_s,
        "planned": result.planned,
        "interrupted": result.interrupted,
        "by_tier": {tier: asdict(counts) for tier, counts in result.tally.by_tier.items()},
    }
    meta_path = writer.close(meta)
    print(loadgen.summary(result, run_id=run_id))
    print(f"records: {out} ({writer.written:,} lines), run: {meta_path}")
    return EXIT_INTERRUPTED if result.interrupted else EXIT_OK


async def _drive(
    trace: list[Arrival],
    sender: HttpSender | KafkaSender,
    options: loadgen.LoadOptions,
    writer: RunWriter,
    progress: ProgressLine,
) -> loadgen.LoadResult:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        stop.set()
        # The default handler comes back: a second Ctrl-C aborts the bounded wind-down at once.
        loop.remove_signal_handler(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)

    def tick(result: loadgen.LoadResult) -> None:
        progress.show(loadgen_line(result.tally, result.planned, result.elapsed_s))
        writer.flush()

    try:
        async with sender:
            target: Sender = sender
            return await loadgen.run_load(
                trace, target, options, stop=stop, on_record=writer.write, on_tick=tick
            )
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


@contextmanager
def _stop_on_signals() -> Iterator[threading.Event]:
    """A stop flag set by the first SIGINT/SIGTERM; the previous handlers are back after the block."""
    stop = threading.Event()
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        signal.signal(signum, previous[signal.Signals(signum)])  # a second one aborts at once

    for s in previous:
        signal.signal(s, on_signal)
    try:
        yield stop
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run_replay(args: argparse.Namespace) -> int:
    tiers = args.tier or [t.value for t in Tier]
    source_settings = kafka(args.source_bootstrap, args.source_prefix)
    target = kafka(args.target_bootstrap or source_settings.bootstrap_servers, args.target_prefix)
    try:
        run_id = check_run_id(args.run_id or new_run_id(prefix="rp"))
        time_range = TimeRange.parse(args.from_, args.to)
        # Checked first: librdkafka would otherwise retry a missing topic for the whole message timeout.
        require_topics(target, [target.topics.requests_by_name(t) for t in tiers])
        source: TopicSource | TraceFileSource = (
            TraceFileSource(args.trace, tiers, time_range)
            if args.trace
            else TopicSource(source_settings.admin_config(), source_settings.topics, tiers, time_range)
        )
    except (LoadtestError, MessagingError, ValueError) as exc:
        return _fail("replay", exc)
    origin = args.trace or f"{source_settings.bootstrap_servers} ({source_settings.topic_prefix}.*)"
    print(f"run id {run_id}: replaying {origin} into {target.bootstrap_servers} ({target.topic_prefix}.*)")
    progress = ProgressLine(sys.stderr)
    started = time.monotonic()

    def show(stats: replay.ReplayStats) -> None:
        if progress.due():
            counts = sorted(stats.by_tier.items())
            progress.show(count_line(counts, stats.read, source.total, time.monotonic() - started))

    conf = replay.producer_config(target.admin_config(), paced=args.speed is not None)
    rewriter = Rewriter(run_id, scenarios=args.scenario)
    try:
        with _stop_on_signals() as stop:
            replayer = replay.Replayer(conf, target.topics, rewriter, stop=stop, on_progress=show)
            stats = replayer.run(source, speed=args.speed)
    except LoadtestError as exc:
        return _fail("replay", exc)
    finally:
        source.close()
    progress.finish(count_line(sorted(stats.by_tier.items()), stats.read, source.total, stats.elapsed_s))
    print(replay.summary(stats, run_id=run_id, speed=args.speed))
    if stats.failed:
        return EXIT_ERROR
    return EXIT_INTERRUPTED if stats.interrupted else EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    settings = kafka(args.bootstrap, args.topic_prefix)
    tiers = args.tier or [t.value for t in Tier]
    out: Path = (
        args.out
        or Path(".inferq") / "traces" / f"{settings.topic_prefix}-{time.strftime('%Y%m%dT%H%M%S')}.avro"
    )
    try:
        time_range = TimeRange.parse(args.from_, args.to)
        source = TopicSource(settings.admin_config(), settings.topics, tiers, time_range)
    except LoadtestError as exc:
        return _fail("trace export", exc)
    print(
        f"exporting up to {source.total:,} records of {settings.topic_prefix}.requests.* "
        f"({', '.join(tiers)}) to {out}"
    )
    progress = ProgressLine(sys.stderr)
    started = time.monotonic()

    def show(stats: export.ExportStats) -> None:
        if progress.due():
            progress.show(
                count_line(
                    sorted(stats.by_tier.items()), stats.written, source.total, time.monotonic() - started
                )
            )

    metadata = {
        "inferq.source": f"{settings.bootstrap_servers}/{settings.topic_prefix}",
        "inferq.from_ms": str(time_range.from_ms or ""),
        "inferq.to_ms": str(time_range.to_ms or ""),
        "inferq.tiers": ",".join(tiers),
    }
    try:
        with _stop_on_signals() as stop:
            stats = export.export_trace(source, out, metadata=metadata, on_progress=show, stop=stop)
    except LoadtestError as exc:
        return _fail("trace export", exc)
    finally:
        source.close()
    progress.finish(count_line(sorted(stats.by_tier.items()), stats.written, source.total, stats.elapsed_s))
    print(export.summary(stats, out))
    return EXIT_INTERRUPTED if stop.is_set() else EXIT_OK
