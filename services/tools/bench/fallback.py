"""`inferq bench fallback`: the primary backend down for a period, every tier falling back to a spare.

Two simulated backends (processes, speed 10, each allowing the budget) and one dispatcher in this
process with the product's defaults (adaptive budget on, 3 attempts, the breaker's defaults unless
given), every tier ordered ``default`` then ``spare``. A steady mix goes straight to the request
topics (chat 10/s, analyses 3/s, briefs 1/s) for `warm_s`; then the primary answers every call 503
(its outage fault) for `outage_s`; then it is back for `after_s`. Both backends' answers are sampled
every 50 ms. Figures (``fallback_report.py``): requests failed beyond those whose deadline passed
(goal 0), time to switch, time to switch back, chat's latency per phase.

Writes `<out>/fallback.json` and `<out>/fallback.md`, and prints the markdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from confluent_kafka import Producer

from inferq.clock import wall_ms
from inferq.dispatcher.backend_specs import BackendSpec
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.codec import request_codec
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier
from inferq.tools.bench.fallback_report import FallbackFigures, Sample, as_json, figures, markdown
from inferq.tools.bench.kafka import ResultCollector, bench_broker, fresh_topics
from inferq.tools.bench.machine import header, publish, run_record
from inferq.tools.bench.procs import dispatcher_in_process, sim_backend
from inferq.tools.broker.broker import pick_free_ports

SCENARIO = {Tier.HIGH: "realtime_chat", Tier.MEDIUM: "emotion_analysis", Tier.LOW: "morning_brief"}
# Requests a second per tier.
RATES = {Tier.HIGH: 10.0, Tier.MEDIUM: 3.0, Tier.LOW: 1.0}
SAMPLE_S = 0.05
BUDGET = 10


def _request(tier: Tier, now_ms: int) -> InferenceRequest:
    return InferenceRequest(
        request_id=str(uuid.uuid4()),
        scenario=SCENARIO[tier],
        tier=tier,
        created_at_ms=now_ms,
        expire_at_ms=now_ms + DEFAULT_DEADLINES_MS[tier],
        messages=(ChatMessage("user", "hello"),),
    )


@contextlib.contextmanager
def _sims(log_dir: Path) -> Iterator[tuple[str, str]]:
    """The primary and the spare simulated backend, as processes."""
    args = ("--limit", str(BUDGET), "--speed", "10")
    with (
        sim_backend(log_dir / "sim-primary.log", *args) as primary,
        sim_backend(log_dir / "sim-spare.log", *args) as spare,
    ):
        yield primary, spare


async def _answers(client: httpx.AsyncClient, url: str, status: str = "200") -> int:
    stats = (await client.get(f"{url}/stats")).json()
    return int(stats["by_status"].get(status, 0))


async def run_once(
    bootstrap_servers: str,
    *,
    warm_s: float,
    outage_s: float,
    after_s: float,
    breaker: dict[str, float],
    log_dir: Path,
    log: Callable[[str], None],
) -> tuple[FallbackFigures, list[Sample], str]:
    kafka = fresh_topics(bootstrap_servers, "fallback")
    prefix = kafka.topic_prefix
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    codec = request_codec()
    sent: set[str] = set()
    collector = ResultCollector(bootstrap_servers, kafka.topics.results, f"{prefix}-collector")
    collector.start()
    samples: list[Sample] = []
    try:
        with _sims(log_dir) as (primary, spare):
            settings = DispatcherSettings(
                kafka=kafka,
                group_id=f"{prefix}-dispatcher",
                dispatcher_id=f"{prefix}-d0",
                backend_url=f"{primary}/v1",
                backends={"spare": BackendSpec(url=f"{spare}/v1")},
                tier_backends={t: ["default", "spare"] for t in Tier},
                budget=BUDGET,
                schedule_pin="normal",
                metrics_port=pick_free_ports(1)[0],
                **breaker,  # type: ignore[arg-type]
            )
            described = (
                f"{settings.breaker_failures} failures in a row or {settings.breaker_storm_429} 429s in "
                f"{settings.breaker_storm_window_s:g} s open it; {settings.breaker_open_s:g} s to a probe"
            )
            end_s = warm_s + outage_s + after_s
            async with dispatcher_in_process(settings), httpx.AsyncClient(timeout=5.0) as client:
                start = time.monotonic()
                start_ms = wall_ms()
                next_send = dict.fromkeys(Tier, 0.0)
                phase = "warm"
                refused_before = 0
                while (now := time.monotonic() - start) < end_s:
                    if phase == "warm" and now >= warm_s:
                        refused_before = await _answers(client, primary, "503")
                        await client.post(f"{primary}/admin/faults", json={"outage": True})
                        phase = "outage"
                        log(f"outage of the primary at {now:.1f} s")
                    elif phase == "outage" and now >= warm_s + outage_s:
                        await client.post(f"{primary}/admin/faults", json={"outage": False})
                        phase = "after"
                        log(f"primary back at {now:.1f} s")
                    now_ms = wall_ms()
                    for tier, rate in RATES.items():
                        while next_send[tier] <= now:
                            request = _request(tier, now_ms)
                            producer.produce(
                                kafka.topics.requests(tier), codec.encode(request), key=request.key
                            )
                            sent.add(request.request_id)
                            next_send[tier] += 1 / rate
                    producer.poll(0)
                    p, s = await asyncio.gather(_answers(client, primary), _answers(client, spare))
                    samples.append(Sample(round(time.monotonic() - start, 3), p, s))
                    await asyncio.sleep(SAMPLE_S)
                producer.flush(30)
                log(f"sent {len(sent)} requests over {end_s:g} s; waiting for their outcomes")
                results = await asyncio.to_thread(collector.wait_for, sent, 120.0)
                p, s = await asyncio.gather(_answers(client, primary), _answers(client, spare))
                samples.append(Sample(round(time.monotonic() - start, 3), p, s))
                refused = await _answers(client, primary, "503") - refused_before
    finally:
        collector.stop()
    found = figures(
        sent=len(sent),
        results=list(results.values()),
        samples=samples,
        start_ms=start_ms,
        outage=(warm_s, warm_s + outage_s),
        end_s=end_s,
        primary_refused=refused,
    )
    return found, samples, described


def run(
    *, out: Path, home: Path, warm_s: float, outage_s: float, after_s: float, breaker: dict[str, float]
) -> int:
    def log(line: str) -> None:
        print(line, flush=True)

    started = time.monotonic()
    with bench_broker(home, log) as servers:
        f, samples, described = asyncio.run(
            run_once(
                servers,
                warm_s=warm_s,
                outage_s=outage_s,
                after_s=after_s,
                breaker=breaker,
                log_dir=home / "fallback",
                log=log,
            )
        )
    context = {"warm_s": warm_s, "outage_s": outage_s, "after_s": after_s, "breaker": described}
    document = run_record("fallback", time.monotonic() - started) | as_json(f, context, samples)
    intro = (
        f"Two simulated backends (speed 10, {BUDGET} calls each), budget {BUDGET}, every tier `default` "
        f"then `spare`; chat 10/s, analyses 3/s, briefs 1/s; the primary healthy {warm_s:g} s, answering "
        f"503 for {outage_s:g} s, healthy {after_s:g} s."
    )
    markdown_text = markdown(f, f"{header(document)}\n\n{intro}", described)
    publish(out, "fallback", document, markdown_text, indent=2, json_end="\n")
    return 0
