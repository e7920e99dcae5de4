"""`inferq bench probe-dispatcher`: the dispatcher as shipped, with its fetches timed and, on request,
profiled, for the latency and throughput benchmarks.

The dispatcher's code is not changed: this entry point wraps `KafkaTierConsumer.fetch` (the consumer
edge) before running `inferq dispatcher`, and stamps `time.time_ns()` on every record the run loop receives.
That is the "consumed by the dispatcher" instant of the latency breakdown, which no record or metric
carries. The cost is one clock read per fetch and one dict entry per record. The stamps (a record
fetched again after a read-ahead rewind keeps its last, admitting, stamp) are written as JSON when
the dispatcher exits after SIGTERM. `--profile` runs the dispatcher's main thread (the event loop)
under cProfile and writes the stats file at exit.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferq.dispatcher.consumer import Batches
    from inferq.dispatcher.kafka_consumer import KafkaTierConsumer


def record_key(topic: str, partition: int, offset: int) -> str:
    return f"{topic}:{partition}:{offset}"


def _time_fetches(stamps: dict[str, int]) -> None:
    from inferq.dispatcher.kafka_consumer import KafkaTierConsumer

    original = KafkaTierConsumer.fetch

    async def fetch(self: KafkaTierConsumer, max_records: int, timeout_ms: int) -> Batches:
        batches = await original(self, max_records, timeout_ms)
        now = time.time_ns()
        for tp, records in batches.items():
            for record in records:
                stamps[record_key(tp.topic, tp.partition, record.offset)] = now
        return batches

    # Instrumentation from outside, so that the dispatcher's file stays exactly what ships.
    KafkaTierConsumer.fetch = fetch  # type: ignore[method-assign]


def run(port: int, *, fetch_log: Path | None, profile: Path | None) -> int:
    """Run `inferq dispatcher --port PORT` (settings from the environment) until it stops."""
    from inferq.dispatcher.cli import register

    parser = argparse.ArgumentParser(prog="inferq")
    register(parser.add_subparsers(dest="command", required=True))

    def main(argv: list[str]) -> int:
        args = parser.parse_args(argv)
        code: int = args.func(args)
        return code

    stamps: dict[str, int] = {}
    if fetch_log is not None:
        _time_fetches(stamps)
    argv = ["dispatcher", "--port", str(port)]
    profiler = cProfile.Profile() if profile is not None else None
    try:
        code: int = profiler.runcall(main, argv) if profiler is not None else main(argv)
    finally:
        if profiler is not None and profile is not None:
            profile.parent.mkdir(parents=True, exist_ok=True)
            profiler.dump_stats(profile)
        if fetch_log is not None:
            fetch_log.parent.mkdir(parents=True, exist_ok=True)
            fetch_log.write_text(json.dumps(stamps), encoding="utf-8")
    return code
