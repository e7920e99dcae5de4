"""`inferq bench tokens`: the token budget against the simulated backend limited in tokens per minute.

Per policy (inferq, then fifo), from fresh topics: the simulated backend (a process) with
`--tpm` set and a concurrency limit far above what the minute allows (so only tokens bind), and one
dispatcher in this process (budget 50, the normal window, `INFERQ_DISPATCHER_RATE_LIMITS` at the same TPM).
Mixed tiers: a backlog of briefs and analyses at the start and chat arriving steadily at 60% of
the minute's calls, more than the minute's tokens in all. Measured over `minutes` from the first
dispatch: tokens per minute achieved against the limit (target >= 95%), the simulator's 429s for
calls past its minute (target 0), and the waits per tier (HIGH's under inferq beside FIFO's).

Writes `<out>/tokens.json` and `<out>/tokens.md`, and prints the markdown.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer

from inferq.clock import wall_ms
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.codec import request_codec
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier
from inferq.tools.bench.kafka import ResultCollector, bench_broker, fresh_topics
from inferq.tools.bench.machine import header, publish, run_record
from inferq.tools.bench.procs import dispatcher_in_process, sim_backend
from inferq.tools.bench.tokens_report import TokensRow, as_json, markdown, row
from inferq.tools.broker.broker import pick_free_ports

MODEL = "inferq-bench"  # one model for every tier: one minute of tokens shared by the tiers
SCENARIO = {Tier.HIGH: "realtime_chat", Tier.MEDIUM: "emotion_analysis", Tier.LOW: "morning_brief"}
HIGH_SHARE = 0.6  # chat's arrivals, as a share of the calls the minute allows
PROMPT = "x" * 400  # 100 prompt tokens and at most 20 answered: about 120 a call


def _request(tier: Tier, now_ms: int) -> InferenceRequest:
    return InferenceRequest(
        request_id=str(uuid.uuid4()),
        scenario=SCENARIO[tier],
        tier=tier,
        created_at_ms=now_ms,
        expire_at_ms=now_ms + 3_600_000,
        messages=(ChatMessage("user", PROMPT),),
        model=MODEL,
        params={"max_tokens": "20"},
    )


async def run_policy(
    bootstrap_servers: str,
    policy: str,
    *,
    tpm: int,
    minutes: float,
    log_dir: Path,
    log: Callable[[str], None],
) -> TokensRow:
    kafka = fresh_topics(bootstrap_servers, f"tokens-{policy}")
    prefix = kafka.topic_prefix
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    codec = request_codec()
    sent: set[str] = set()

    def send(tier: Tier, count: int) -> None:
        now_ms = wall_ms()
        for _ in range(count):
            request = _request(tier, now_ms)
            producer.produce(kafka.topics.requests(tier), codec.encode(request), key=request.key)
            sent.add(request.request_id)
        producer.flush(30)

    collector = ResultCollector(bootstrap_servers, kafka.topics.results, f"{prefix}-collector")
    collector.start()
    per_minute = tpm // 120
    sim_args = ("--tpm", str(tpm), "--limit", "1000", "--speed", "20")
    with sim_backend(log_dir / "sim-backend.log", *sim_args) as url:
        settings = DispatcherSettings(
            kafka=kafka,
            group_id=f"{prefix}-dispatcher",
            dispatcher_id=f"{prefix}-d0",
            backend_url=f"{url}/v1",
            budget=50,
            policy=policy,
            schedule_pin="normal",
            adaptive=False,
            rate_limits={MODEL: {"tpm": tpm}},
            metrics_port=pick_free_ports(1)[0],
        )
        async with dispatcher_in_process(settings):
            # More than the measured minutes' tokens in briefs and analyses at once...
            total = int(per_minute * (minutes + 1))
            send(Tier.LOW, total // 2)
            send(Tier.MEDIUM, total // 3)
            # ...and chat arriving all along at 60% of the minute's calls: above HIGH's 50% share in
            # the normal window (a tier below its share leaves the rest of it unused, see
            # docs/architecture.md, "Token budget"), below the whole minute, so its waits stay bounded.
            high_interval_s = 60 / max(1.0, per_minute * HIGH_SHARE)
            started = time.monotonic()
            while time.monotonic() - started < minutes * 60:
                send(Tier.HIGH, 1)
                await asyncio.sleep(high_interval_s)
            log(f"[{policy}] sent {len(sent)} requests over {minutes:g} min")
            await asyncio.sleep(2.0)
        async with httpx.AsyncClient() as client:
            stats: dict[str, Any] = (await client.get(f"{url}/stats")).json()
    results = await asyncio.to_thread(collector.wait_for, sent, 1.0)
    collector.stop()
    return row(policy, tpm, minutes, list(results.values()), int(stats.get("rate_limited", 0)))


def run(*, out: Path, home: Path, tpm: int = 6000, minutes: float = 2.0) -> int:
    def log(line: str) -> None:
        print(line, flush=True)

    started = time.monotonic()
    rows: dict[str, TokensRow] = {}
    with bench_broker(home, log) as servers:
        for policy in ("inferq", "fifo"):
            rows[policy] = asyncio.run(
                run_policy(servers, policy, tpm=tpm, minutes=minutes, log_dir=home / "tokens", log=log)
            )
    document = {
        **run_record("tokens", time.monotonic() - started),
        **as_json(rows, {"tpm": tpm, "minutes": minutes}),
    }
    intro = (
        f"Simulated backend at {tpm} tokens per minute, {minutes:g} min per policy, one dispatcher "
        "(budget 50, normal window), every tier on one model."
    )
    publish(
        out, "tokens", document, markdown(rows, f"{header(document)}\n\n{intro}"), indent=2, json_end="\n"
    )
    return 0
