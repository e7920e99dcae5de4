"""`inferq demo`: broker, topics, every service as a process, a mixed workload, a table, a clean stop."""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.broker.broker import BrokerConfig, LocalBroker
from inferq.tools.demo.workload import evening_mix, format_table, submit_all, wait_outcomes
from inferq.tools.stack.pipeline import Pipeline


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("demo", help="run the whole pipeline on a small mixed workload")
    parser.add_argument("--home", type=Path, default=Path(".inferq"), help="working folder (default .inferq)")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for every outcome")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    home: Path = args.home.resolve()
    started = time.monotonic()
    broker: LocalBroker | None = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if bootstrap is None:
        broker = LocalBroker(BrokerConfig(home=home / "kafka"))
        if broker.is_running():
            print(f"using the broker already running at {broker.bootstrap}")
            broker = None
            bootstrap = "127.0.0.1:9092"
        else:
            took = broker.start()
            bootstrap = broker.bootstrap
            print(f"broker started at {bootstrap} in {took:.1f} s")
    # The workload is the evening peak's, so the schedule's peak window is pinned whatever the hour.
    pipeline = Pipeline(
        bootstrap=bootstrap, work_dir=home / "demo", extra_env={"INFERQ_DISPATCHER_SCHEDULE_PIN": "peak"}
    )
    try:
        outcome = create_topics(KafkaSettings(bootstrap_servers=bootstrap))
        print("topics: " + ", ".join(f"{n} ({s})" for n, s in outcome.items()))
        ready = pipeline.start()
        print("services ready: " + ", ".join(f"{n} {s:.1f} s" for n, s in ready.items()))
        items = evening_mix()
        accepted = asyncio.run(submit_all(pipeline.ingest_url, items))
        print(f"submitted {len(accepted)} requests through {pipeline.ingest_url}/v1/requests")
        outcomes = asyncio.run(
            wait_outcomes(pipeline.results_url, [a["request_id"] for a in accepted], args.timeout)
        )
        print()
        print(format_table(accepted, outcomes))
        stats = pipeline.backend_stats()
        print()
        print(
            f"backend: max concurrency {stats['max_in_flight']} (budget {pipeline.budget}), "
            f"answers by status {stats['by_status']}"
        )
        ok = sum(1 for o in outcomes.values() if o["status"] == "OK")
        print(f"{ok}/{len(accepted)} OK, {len(accepted) - len(outcomes)} missing")
        success = ok == len(accepted) and int(str(stats["max_in_flight"])) <= pipeline.budget
    finally:
        codes = pipeline.stop()
        print("stopped: " + ", ".join(f"{n} (exit {c})" for n, c in codes.items()))
        if broker is not None:
            broker.stop()
            print("broker stopped")
    print(f"demo took {time.monotonic() - started:.1f} s")
    return 0 if success else 1
