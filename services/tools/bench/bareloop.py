"""The throughput benchmark's baselines, each run as a process of its own (`inferq bench bareloop`).

`loop`: the least a Python program must do to do the dispatcher's job, and nothing more: consume
request records with confluent-kafka, decode them (Avro, the project's codec), call the backend over
HTTP with aiohttp (at most `concurrency` calls at once: the same budget), encode a result record and
produce it with the dispatcher's producer settings (idempotent, acks=all). It has none of the
dispatcher's guarantees: offsets are auto-committed whether or not the result was written, there is
no scheduling, no deadline, no retry, no dead letter. It stops after `count` results are acknowledged.

`blast`: the backend alone: `concurrency` aiohttp callers posting the same chat body back to back,
`count` calls in all. Its rate is the ceiling every consumer of that backend is under.

Each writes a JSON summary to `--summary`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
from confluent_kafka import Consumer, KafkaError, Message, Producer

from inferq.clock import wall_ms
from inferq.messaging.codec import request_codec, result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceResult, Status, Usage

BLAST_BODY = {"model": "inferq-fast", "messages": [{"role": "user", "content": "Hi, how was your day?"}]}
CONSUME_BATCH = 500
CONSUME_WAIT_S = 0.1
HTTP_TIMEOUT_S = 30.0


@dataclass
class Summary:
    mode: str
    count: int
    done: int
    errors: int
    first_ns: int | None
    last_ns: int | None

    @property
    def rate_per_s(self) -> float | None:
        if self.first_ns is None or self.last_ns is None or self.last_ns <= self.first_ns:
            return None
        return (self.done - 1) / ((self.last_ns - self.first_ns) / 1e9)

    def answered(self, ok: bool) -> None:
        """One answer: an error, or one more done (the first and last instants kept)."""
        if not ok:
            self.errors += 1
            return
        self.done += 1
        self.last_ns = time.time_ns()
        if self.first_ns is None:
            self.first_ns = self.last_ns

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({**asdict(self), "rate_per_s": self.rate_per_s}), encoding="utf-8")


async def loop(
    *,
    bootstrap: str,
    source_topic: str,
    result_topic: str,
    group_id: str,
    backend_url: str,
    concurrency: int,
    count: int,
    timeout_s: float,
) -> Summary:
    """Consume → call → produce until `count` results are acknowledged (or `timeout_s` passes)."""
    summary = Summary("loop", count, 0, 0, None, None)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,  # the bare minimum: no commit-after-result bookkeeping
        }
    )
    producer = Producer(
        KafkaSettings(bootstrap_servers=bootstrap).producer_config(client_id="inferq-bareloop")
    )
    requests, results = request_codec(), result_codec()
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=concurrency)
    all_acked = asyncio.Event()

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        # Called from producer.poll() on the event loop's thread (the workers poll), or from flush().
        summary.answered(err is None)
        if summary.done >= count:
            all_acked.set()

    async def worker(session: aiohttp.ClientSession) -> None:
        while True:
            raw = await queue.get()
            request = requests.decode(raw)
            payload = {"model": request.model or "inferq-fast", "messages": request.openai_messages()}
            dispatched_ms = wall_ms()
            try:
                async with session.post(f"{backend_url}/chat/completions", json=payload) as response:
                    body = await response.json() if response.status == 200 else None
            except aiohttp.ClientError:
                body = None
            if body is None:
                summary.errors += 1  # counted, not retried: the run then reports fewer results than asked
                continue
            usage = body.get("usage")
            result = InferenceResult(
                request_id=request.request_id,
                tier=request.tier,
                status=Status.OK,
                output=body["choices"][0]["message"]["content"],
                model=body.get("model", payload["model"]),
                usage=Usage(usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"])
                if usage
                else None,
                enqueued_at_ms=request.created_at_ms,
                dispatched_at_ms=dispatched_ms,
                completed_at_ms=wall_ms(),
                attempts=request.attempt,
                dispatcher_id="bareloop",
            )
            producer.produce(
                result_topic,
                results.encode(result),
                key=request.request_id.encode(),
                on_delivery=on_delivery,
            )
            producer.poll(0)

    consumer.subscribe([source_topic])
    deadline = time.monotonic() + timeout_s
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=concurrency)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            workers = [asyncio.create_task(worker(session)) for _ in range(concurrency)]
            taken = 0
            while taken < count and time.monotonic() < deadline:
                # librdkafka's consume blocks: off the event loop, one batch at a time.
                batch = await asyncio.to_thread(
                    consumer.consume, min(CONSUME_BATCH, count - taken), CONSUME_WAIT_S
                )
                for message in batch:
                    if message.error() is None:
                        await queue.put(message.value() or b"")
                        taken += 1
                producer.poll(0)
            while not all_acked.is_set() and time.monotonic() < deadline:
                producer.poll(0)
                await asyncio.sleep(0.005)
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
    finally:
        await asyncio.to_thread(producer.flush, 10.0)
        consumer.close()
    return summary


async def blast(*, backend_url: str, concurrency: int, count: int, timeout_s: float) -> Summary:
    """`count` calls by `concurrency` aiohttp callers back to back; the backend's rate with no Kafka."""
    summary = Summary("blast-aiohttp", count, 0, 0, None, None)
    remaining = count
    url = f"{backend_url}/chat/completions"

    async def caller(session: aiohttp.ClientSession) -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            async with session.post(url, json=BLAST_BODY) as response:
                await response.read()
            summary.answered(response.status == 200)

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(caller(session)) for _ in range(concurrency)]
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return summary


def run(args: argparse.Namespace) -> int:
    """Entry point of `inferq bench bareloop` (arguments from `inferq.tools.bench.cli`)."""
    import uvloop

    summary_path: Path = args.summary
    if args.mode == "blast":
        summary = uvloop.run(
            blast(
                backend_url=args.backend_url,
                concurrency=args.concurrency,
                count=args.count,
                timeout_s=args.timeout,
            )
        )
    else:
        summary = uvloop.run(
            loop(
                bootstrap=args.bootstrap,
                source_topic=args.source_topic,
                result_topic=args.result_topic,
                group_id=args.group,
                backend_url=args.backend_url,
                concurrency=args.concurrency,
                count=args.count,
                timeout_s=args.timeout,
            )
        )
    summary.write(summary_path)
    return 0 if summary.done >= summary.count and summary.errors == 0 else 1
