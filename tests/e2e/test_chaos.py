"""Chaos: whatever crashes, every accepted request ends with exactly one terminal outcome.

Each test runs the services as processes against a real broker, breaks something while work is
queued or in flight (a SIGKILLed dispatcher, a stopped broker, a backend outage, poison records),
and then accounts for every request with a `Ledger`: lost == 0 and caller-visible duplicates == 0.
Run with `-s` to see the counts each test prints.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, Message, Producer

from inferq.messaging.admin import create_topics
from inferq.messaging.codec import HEADER_SIZE, request_codec, result_codec
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.records import InferenceResult, Status
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames
from inferq.tools.stack.pipeline import Pipeline, PipelinePorts
from tests.support.inprocess import free_port
from tests.support.kafka import a_request, committed_offsets, end_offsets, own_broker, read_all
from tests.support.ledger import Answer, Ledger, request_body
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LONG_DEADLINE_MS = 120_000


# -- shared plumbing ----------------------------------------------------------------------------------


def new_pipeline(
    bootstrap: str,
    work_dir: Path,
    *,
    backend_args: list[str],
    extra_env: dict[str, str],
) -> Pipeline:
    """A pipeline on free ports with its own topic prefix (topics created) and data under `work_dir`."""
    prefix = f"chaos{uuid.uuid4().hex[:10]}"
    create_topics(KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix))
    return Pipeline(
        bootstrap=bootstrap,
        work_dir=work_dir,
        ports=PipelinePorts(
            ingest=free_port(), results=free_port(), dispatcher=free_port(), backend=free_port()
        ),
        topic_prefix=prefix,
        backend_args=backend_args,
        # Admission is not what these tests are about: a 429 would only shrink what is owed.
        extra_env={
            "INFERQ_INGEST_ADMISSION_ENABLED": "false",
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
            **extra_env,
        },
    )


@contextmanager
def running(stack: Pipeline, *, dispatchers: int = 1) -> Iterator[Pipeline]:
    """Start every service; stop all of them however the block ends (SIGKILLed ones are already gone)."""
    try:
        stack.start(dispatchers=dispatchers)
        yield stack
    finally:
        codes = stack.stop()
        print(f"\nexit codes: {codes}")


def results_stored(stack: Pipeline) -> int:
    count: int = httpx.get(f"{stack.results_url}/healthz", timeout=5).json()["results"]
    return count


def assert_all_alive(stack: Pipeline, *, except_: frozenset[str] = frozenset()) -> None:
    dead = [p.name for p in stack.processes if p.name not in except_ and not p.alive()]
    assert not dead, f"services died during the test: {dead} (logs in {stack.work_dir / 'logs'})"


def finish_account(ledger: Ledger, stack: Pipeline, timeout_s: float) -> None:
    """Wait for every accepted request's outcome, read them again, read the results topic and store."""
    asyncio.run(ledger.collect(stack.results_url, timeout_s, rereads=2))
    ledger.read_results_topic(stack.bootstrap, TopicNames(stack.topic_prefix).results)
    ledger.count_store_rows(stack.work_dir / "results.db")


def millis() -> int:
    return time.time_ns() // 1_000_000


# -- 1. a dispatcher SIGKILLed with hundreds of requests queued or in flight ---------------------------


@dataclass(frozen=True)
class Takeover:
    victim_partitions: list[str]
    first_dispatch_s: float | None
    first_result_s: float | None
    longest_gap_s: float
    redone: int  # requests answered by both dispatchers
    repeated: dict[str, int]  # requests one dispatcher answered more than once, per dispatcher


def request_partitions(bootstrap: str, topics: list[str]) -> dict[str, str]:
    """request_id → "topic[partition]" for every record on `topics`."""
    codec = request_codec()
    where: dict[str, str] = {}
    for topic in topics:
        for message in read_all(bootstrap, topic):
            where[codec.decode(message.value() or b"").request_id] = f"{topic}[{message.partition()}]"
    return where


def measure_takeover(
    ledger: Ledger, where: dict[str, str], victim: str, survivor: str, killed_at_ms: int
) -> Takeover:
    """How long the victim's partitions went unserved: from the SIGKILL to the survivor's first call
    (and first outcome) for a request of a partition only the victim had served before."""
    records = [r for rid in ledger.accepted for r in (ledger.topic_outcomes or {}).get(rid, [])]
    victim_parts = {
        where[r["request_id"]]
        for r in records
        if r["dispatcher_id"] == victim and r["completed_at_ms"] <= killed_at_ms
    }
    survivor_before = {
        where[r["request_id"]]
        for r in records
        if r["dispatcher_id"] == survivor and r["completed_at_ms"] <= killed_at_ms
    }
    orphaned = victim_parts - survivor_before
    taken_over = [
        r
        for r in records
        if r["dispatcher_id"] == survivor and where[r["request_id"]] in orphaned
        if r["completed_at_ms"] > killed_at_ms
    ]
    dispatches = [r["dispatched_at_ms"] for r in taken_over if r["dispatched_at_ms"] is not None]
    completions = sorted(r["completed_at_ms"] for r in records if r["completed_at_ms"] > killed_at_ms)
    gaps = [b - a for a, b in zip([killed_at_ms, *completions], completions, strict=False)]
    by_dispatcher: dict[str, set[str]] = {}
    for r in records:
        by_dispatcher.setdefault(r["request_id"], set()).add(r["dispatcher_id"])
    answers = Counter((r["request_id"], r["dispatcher_id"]) for r in records)
    repeated = Counter(dispatcher for (_, dispatcher), n in answers.items() if n > 1)
    return Takeover(
        victim_partitions=sorted(orphaned),
        first_dispatch_s=(min(dispatches) - killed_at_ms) / 1000 if dispatches else None,
        first_result_s=(min(r["completed_at_ms"] for r in taken_over) - killed_at_ms) / 1000
        if taken_over
        else None,
        longest_gap_s=max(gaps, default=0) / 1000,
        redone=sum(1 for ids in by_dispatcher.values() if {victim, survivor} <= ids),
        repeated=dict(repeated),
    )


@pytest.mark.redis
def test_sigkilled_dispatcher_loses_nothing_and_its_peer_takes_over(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    stack = new_pipeline(
        kafka_bootstrap,
        tmp_path,
        # Ten times faster than the real API: analysis 0.28 s, briefs 0.5 s per call.
        backend_args=["--speed", "10"],
        extra_env={
            "INFERQ_COORDINATION": "redis",
            "INFERQ_REDIS_URL": redis_url,
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
        },
    )
    ledger = Ledger("sigkill-dispatcher")
    bodies = [
        *(
            request_body("emotion_analysis", f"diary {i}", session_id=f"d{i}", deadline_ms=LONG_DEADLINE_MS)
            for i in range(300)
        ),
        *(request_body("morning_brief", f"brief {i}", session_id=f"b{i}") for i in range(60)),
    ]
    with running(stack, dispatchers=2):
        asyncio.run(ledger.submit_all(stack.ingest_url, bodies))
        assert len(ledger.accepted) == len(bodies), f"ingest refused some: {ledger.tally().refused}"
        wait_until(lambda: results_stored(stack) >= 40, "the first 40 outcomes", 30, interval_s=0.05)
        health = [httpx.get(f"{stack.dispatcher_url(i)}/healthz", timeout=5).json() for i in range(2)]
        victim = max(range(2), key=lambda i: (health[i]["assigned"], health[i]["tokens_in_use"]))
        survivor = 1 - victim
        outstanding = len(bodies) - results_stored(stack)
        killed_at_ms = millis()
        stack.dispatchers[victim].kill()
        print(
            f"\nSIGKILL dispatcher-{victim} ({health[victim]['assigned']} partitions, "
            f"{health[victim]['tokens_in_use']} calls in flight, {health[victim]['waiting']} in its "
            f"read-ahead); {outstanding} of {len(bodies)} requests not yet answered"
        )
        assert outstanding >= 200, "the kill came too late to matter: fewer than 200 requests outstanding"
        finish_account(ledger, stack, timeout_s=75)
        assert_all_alive(stack, except_=frozenset({stack.dispatchers[victim].name}))
        where = request_partitions(
            kafka_bootstrap, [f"{stack.topic_prefix}.requests.{t}" for t in ("medium", "low")]
        )
        calls: dict[str, int] = stack.backend_stats()["by_status"]  # type: ignore[assignment]
    takeover = measure_takeover(
        ledger, where, f"{stack.topic_prefix}-d{victim}", f"{stack.topic_prefix}-d{survivor}", killed_at_ms
    )
    print(ledger.report())
    print(
        f"[{ledger.name}] takeover of {takeover.victim_partitions}: first call by the survivor "
        f"{takeover.first_dispatch_s} s after the SIGKILL, first outcome {takeover.first_result_s} s; "
        f"longest pause in completions {takeover.longest_gap_s:.2f} s; requests answered by both "
        f"{takeover.redone}, more than once by the same dispatcher {takeover.repeated}; backend calls "
        f"answered 200: {calls.get('200', 0)} for {len(bodies)} requests; "
        f"test took {time.monotonic() - started:.1f} s"
    )
    ledger.assert_promise_kept()
    assert ledger.statuses(ledger.accepted) == {"OK": len(bodies)}
    assert takeover.victim_partitions, "no partition was served by the victim alone before the kill"
    assert takeover.first_dispatch_s is not None, (
        "the survivor never served the killed dispatcher's partitions"
    )
    # A loose bound, not a measurement: the dispatcher's session (2 s) and the survivor's next
    # heartbeat (0.5 s) make the takeover about 2.5 s; `inferq bench takeover` measures it.
    assert takeover.first_dispatch_s <= 20.0


# -- 2. the broker stopped and restarted mid-load -----------------------------------------------------


class Submitters:
    """Threads that keep submitting (chat and long-deadline analysis, each with its own request_id)
    until stopped, recording every answer in the ledger."""

    def __init__(self, ledger: Ledger, ingest_url: str, *, threads: int, interval_s: float) -> None:
        self._ledger = ledger
        self._url = ingest_url
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def _run(self, index: int) -> None:
        with httpx.Client(base_url=self._url, timeout=10.0) as client:
            n = 0
            while not self._stop.is_set():
                rid = f"bg{index}-{n}-{uuid.uuid4().hex[:8]}"
                if n % 2:
                    body = request_body(
                        "realtime_chat", f"still there? {n}", session_id=f"bg{index}", request_id=rid
                    )
                else:
                    body = request_body(
                        "emotion_analysis", f"diary {n}", deadline_ms=LONG_DEADLINE_MS, request_id=rid
                    )
                self._ledger.submit(client, body)
                n += 1
                self._stop.wait(self._interval_s)  # pacing between submissions, and the stop signal

    def __enter__(self) -> Submitters:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15.0)
        assert not any(t.is_alive() for t in self._threads), "a submitter hung past its client timeout"


def answers_between(ledger: Ledger, start: float, end: float) -> list[Answer]:
    """Answers to submissions sent at or after `start` and answered before `end` (monotonic)."""
    return [a for a in list(ledger.answers) if a.sent_at >= start and a.answered_at <= end]


PRODUCE_TIMEOUT_S = 2.0
# Longer than the producers' message timeout (10 s): outcomes finished during the outage are produced
# again and again until the broker is back, not just retried inside librdkafka.
OUTAGE_S = 12.0


def test_broker_restart_mid_load_keeps_every_promise(tmp_path: Path) -> None:
    started = time.monotonic()
    with own_broker(tmp_path / "kafka") as broker:
        stack = new_pipeline(
            broker.bootstrap,
            tmp_path / "stack",
            # Analysis takes 0.7 s: calls are in flight and a backlog is queued when the broker stops.
            backend_args=["--speed", "4"],
            extra_env={"INFERQ_INGEST_PRODUCE_TIMEOUT_S": str(PRODUCE_TIMEOUT_S)},
        )
        ledger = Ledger("broker-restart")
        with running(stack):
            asyncio.run(
                ledger.submit_all(
                    stack.ingest_url,
                    [
                        request_body("emotion_analysis", f"diary {i}", deadline_ms=LONG_DEADLINE_MS)
                        for i in range(120)
                    ],
                )
            )
            assert len(ledger.accepted) == 120
            with Submitters(ledger, stack.ingest_url, threads=4, interval_s=0.1):
                wait_until(lambda: len(ledger.answers) >= 160, "background traffic before the outage", 20)
                stop_began = time.monotonic()
                broker.stop()
                down_at = time.monotonic()
                in_flight_at_stop = len(ledger.accepted) - results_stored(stack)
                # The outage itself lasts OUTAGE_S, and long enough for the clients to see refusals.
                wait_until(
                    lambda: (
                        time.monotonic() - down_at >= OUTAGE_S
                        and sum(
                            1 for a in answers_between(ledger, down_at, time.monotonic()) if a.status == 503
                        )
                        >= 4
                    ),
                    "503s while the broker is down",
                    30,
                    interval_s=0.1,
                )
                restart_began = time.monotonic()
                broker.start(timeout_s=60)
                up_at = time.monotonic()
                wait_until(
                    lambda: (
                        sum(1 for a in answers_between(ledger, up_at, time.monotonic()) if a.status == 202)
                        >= 20
                    ),
                    "202s again after the restart",
                    30,
                    interval_s=0.05,
                )
                recovered_s = time.monotonic() - up_at
            during = answers_between(ledger, down_at, restart_began)
            finish_account(ledger, stack, timeout_s=60)
            assert_all_alive(stack)
    refusals = [a for a in during if a.status == 503]
    print(
        f"\nbroker stopped in {down_at - stop_began:.2f} s, down {restart_began - down_at:.1f} s, "
        f"restarted in {up_at - restart_began:.1f} s; {in_flight_at_stop} accepted requests unanswered "
        f"at the stop"
    )
    print(
        f"[{ledger.name}] while down: {len(during)} answered submissions, {len(refusals)} x 503 "
        f"(slowest {max((a.seconds for a in refusals), default=0):.2f} s), "
        f"{sum(1 for a in during if a.status == 202)} x 202; ingest accepting again "
        f"{recovered_s:.1f} s after the restart; test took {time.monotonic() - started:.1f} s"
    )
    print(ledger.report())
    assert not [a for a in during if a.status == 202], "202 answered while no broker could acknowledge"
    assert refusals, "no 503 while the broker was down"
    assert {a.status for a in during} == {503}
    assert all(a.seconds <= PRODUCE_TIMEOUT_S + 2.0 for a in refusals), "a 503 took longer than its bound"
    assert all(a.retry_after for a in refusals), "a 503 without Retry-After"
    assert ledger.tally().unanswered == 0, "a submission got no HTTP answer at all"
    ledger.assert_promise_kept()


# -- 3. a backend outage longer than some requests' retry budget, shorter than others' ------------------


MAX_ATTEMPTS = 4
RETRY_AFTER_S = 2


def set_outage(stack: Pipeline, on: bool) -> None:
    response = httpx.post(f"{stack.backend_url}/admin/faults", json={"outage": on}, timeout=5)
    assert response.json()["outage"] is on


def backend_503s(stack: Pipeline) -> int:
    by_status: dict[str, int] = stack.backend_stats()["by_status"]  # type: ignore[assignment]
    return by_status.get("503", 0)


def test_backend_outage_fails_exhausted_expires_interactive_and_retries_the_rest(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    stack = new_pipeline(
        kafka_bootstrap,
        tmp_path,
        backend_args=["--speed", "5"],
        extra_env={
            # Four attempts: about 6 s of retrying at the backend's Retry-After. A 2 s chat reaches
            # its deadline first (the Retry-After is capped at half the time it has left).
            "INFERQ_SIM_RETRY_AFTER_S": str(RETRY_AFTER_S),
            "INFERQ_DISPATCHER_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
            "INFERQ_DISPATCHER_RETRY_BASE_BACKOFF_S": "0.1",
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
        },
    )
    ledger = Ledger("backend-outage")

    def submit(bodies: list[dict[str, Any]]) -> list[str]:
        answers = asyncio.run(ledger.submit_all(stack.ingest_url, bodies))
        assert {a.status for a in answers} == {202}
        return [a.request_id for a in answers if a.request_id is not None]

    with running(stack):
        # A long outage: longer than the retry budget of analysis, longer than a chat's deadline.
        set_outage(stack, True)
        exhausted = submit(
            [request_body("emotion_analysis", f"a{i}", deadline_ms=LONG_DEADLINE_MS) for i in range(20)]
        )
        chats = submit([request_body("realtime_chat", f"c{i}", deadline_ms=2_000) for i in range(20)])
        long_outage_began = time.monotonic()
        asyncio.run(ledger.collect(stack.results_url, 30, ids=[*exhausted, *chats]))
        long_outage_s = time.monotonic() - long_outage_began
        set_outage(stack, False)

        # A short outage: every request fails once, then the backend is back within its retry budget.
        set_outage(stack, True)
        short_outage_began = time.monotonic()
        failed_before = backend_503s(stack)
        recovered = submit(
            [request_body("emotion_analysis", f"r{i}", deadline_ms=LONG_DEADLINE_MS) for i in range(30)]
        )
        wait_until(
            lambda: backend_503s(stack) >= failed_before + len(recovered),
            "a first failed attempt of each",
            5,
            interval_s=0.05,
        )
        set_outage(stack, False)
        short_outage_s = time.monotonic() - short_outage_began
        # No retry comes before the Retry-After: so far, each 503 was the first attempt of a request.
        assert short_outage_s < RETRY_AFTER_S, "too slow to end the outage before the first retries"

        # After recovery: a fresh mix, and everything queued during the outage, drains.
        after = submit(
            [
                *(request_body("realtime_chat", f"n{i}") for i in range(20)),
                *(request_body("recipe_recommend", f"m{i}", deadline_ms=LONG_DEADLINE_MS) for i in range(10)),
                *(request_body("morning_brief", f"l{i}") for i in range(10)),
            ]
        )
        finish_account(ledger, stack, timeout_s=60)
        topics = TopicNames(stack.topic_prefix)
        group = f"{stack.topic_prefix}-dispatcher"
        drained = [*topics.all_requests, topics.retry]
        wait_until(
            lambda: all(
                committed_offsets(kafka_bootstrap, group, t) == end_offsets(kafka_bootstrap, t)
                for t in drained
            ),
            "the dispatcher group's offsets committed to the end of every request and retry topic",
            15,
            interval_s=0.5,
        )
        retried = sum(end_offsets(kafka_bootstrap, topics.retry).values())
        dead = read_all(kafka_bootstrap, topics.dlq)
        assert_all_alive(stack)

    letters = {_header(m, "inferq.request_id"): m for m in dead}
    attempts = {rid: ledger.outcomes[rid]["attempts"] for rid in recovered if rid in ledger.outcomes}
    print(
        f"\n[{ledger.name}] long outage {long_outage_s:.1f} s: analysis {dict(ledger.statuses(exhausted))}, "
        f"chat (2 s deadline) {dict(ledger.statuses(chats))}; short outage {short_outage_s:.2f} s: "
        f"{dict(ledger.statuses(recovered))}, attempts {dict(sorted(Counter(attempts.values()).items()))}; "
        f"after recovery {dict(ledger.statuses(after))}; {retried} retry records, {len(dead)} dead letters; "
        f"test took {time.monotonic() - started:.1f} s"
    )
    print(ledger.report())
    ledger.assert_promise_kept()
    assert ledger.statuses(exhausted) == {"FAILED": len(exhausted)}
    assert {ledger.outcomes[rid]["attempts"] for rid in exhausted} == {MAX_ATTEMPTS}
    assert ledger.statuses(chats) == {"EXPIRED": len(chats)}, "an interactive request past its deadline"
    assert ledger.statuses(recovered) == {"OK": len(recovered)}
    assert min(attempts.values()) > 1, "a request of the short outage never saw it"
    assert ledger.statuses(after) == {"OK": len(after)}
    assert {ledger.outcomes[rid]["attempts"] for rid in after} == {1}
    # Exactly one dead letter per exhausted request, none for the others.
    assert len(dead) == len(exhausted)
    assert set(letters) == set(exhausted)
    for rid, message in letters.items():
        assert _header(message, "inferq.attempts") == str(MAX_ATTEMPTS)
        assert _header(message, "inferq.status") == "503"
        assert "503" in _header(message, "inferq.error")
        assert request_codec().decode(message.value() or b"").request_id == rid


def _header(message: Message, name: str) -> str:
    """A header's value as text ("" when absent); a consumed record's headers are (key, value) pairs."""
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    for key, value in pairs:
        if key == name:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""


# -- 4. garbage and wrong-schema records interleaved with valid requests --------------------------------


def poison_kinds(rng: random.Random, tier: str) -> dict[str, tuple[bytes, str]]:
    """Each kind of bad record: (its bytes, what the dead letter's inferq.error must say)."""
    noise = bytes([0x00]) + rng.randbytes(63)  # never C3 01
    valid = request_codec().encode(a_request(tier))
    result = InferenceResult(
        request_id=str(uuid.uuid4()),
        tier=Tier(tier),
        status=Status.OK,
        output="not a request",
        model="inferq-fast",
        enqueued_at_ms=millis(),
        completed_at_ms=millis(),
        attempts=1,
        dispatcher_id="chaos",
    )
    return {
        "random bytes": (noise, "C3 01"),
        "JSON": (json.dumps(a_request(tier).to_record()).encode(), "C3 01"),
        "empty": (b"", "C3 01"),
        "an InferenceResult": (result_codec().encode(result), "unknown schema fingerprint"),
        "truncated body": (valid[: HEADER_SIZE + (len(valid) - HEADER_SIZE) // 2], "corrupt body"),
        "header + garbage": (valid[:HEADER_SIZE] + rng.randbytes(40), "cannot decode record"),
        "no messages": (request_codec().encode(a_request(tier, messages=[])), "messages is empty"),
    }


def produce_tracked(bootstrap: str, records: list[tuple[str, int, bytes]]) -> list[tuple[str, int, int]]:
    """Produce (topic, partition, value) in order; returns where each landed (topic, partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    landed: dict[int, tuple[str, int, int]] = {}
    errors: list[str] = []

    def on_delivery(index: int) -> Callable[[KafkaError | None, Message], None]:
        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                landed[index] = (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)

        return report

    for index, (topic, partition, value) in enumerate(records):
        producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery(index))
    assert producer.flush(15) == 0, "records not acknowledged within 15 s"
    assert not errors, errors
    return [landed[i] for i in range(len(records))]


def test_poison_records_are_dead_lettered_and_never_block_valid_ones(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    stack = new_pipeline(kafka_bootstrap, tmp_path, backend_args=["--speed", "10"], extra_env={})
    topics = TopicNames(stack.topic_prefix)
    partitions = {spec.name: spec.partitions for spec in topics.specs()}
    rng = random.Random(20_240_611)
    ledger = Ledger("poison")
    plan: list[tuple[str, int, bytes]] = []
    bad: dict[int, tuple[str, str]] = {}  # index in plan → (kind, expected reason)
    tier_of = {**{topics.requests_by_name(t): t for t in ("HIGH", "MEDIUM", "LOW")}, topics.retry: "MEDIUM"}
    for topic, tier in tier_of.items():
        for i, (kind, (value, reason)) in enumerate(poison_kinds(rng, tier).items()):
            partition = i % partitions[topic]
            before, after = (a_request(tier, deadline_ms=LONG_DEADLINE_MS) for _ in range(2))
            plan.append((topic, partition, request_codec().encode(before)))
            bad[len(plan)] = (kind, reason)
            plan.append((topic, partition, value))
            plan.append((topic, partition, request_codec().encode(after)))
            ledger.accept(before.request_id, {"tenant": before.tenant})
            ledger.accept(after.request_id, {"tenant": after.tenant})
    with running(stack):
        landed = produce_tracked(kafka_bootstrap, plan)
        where_bad = {landed[i]: (plan[i][2], kind, reason) for i, (kind, reason) in bad.items()}
        finish_account(ledger, stack, timeout_s=60)
        wait_until(
            lambda: sum(end_offsets(kafka_bootstrap, topics.dlq).values()) >= len(bad),
            "a dead letter per poison record",
            15,
            interval_s=0.2,
        )
        dead = read_all(kafka_bootstrap, topics.dlq)
        assert_all_alive(stack)
    print(
        f"\n[{ledger.name}] {len(plan)} records on {len(tier_of)} topics: {len(ledger.accepted)} valid "
        f"{dict(ledger.statuses(ledger.accepted))}, {len(bad)} poison ({len(bad) // len(tier_of)} kinds per "
        f"topic), {len(dead)} dead letters; test took {time.monotonic() - started:.1f} s"
    )
    print(ledger.report())
    ledger.assert_promise_kept()
    assert ledger.statuses(ledger.accepted) == {"OK": len(ledger.accepted)}
    # No outcome for anything but the valid requests (a poison record has no caller to answer).
    assert set(ledger.topic_outcomes or {}) == set(ledger.accepted)
    assert len(dead) == len(bad)
    found: set[tuple[str, int, int]] = set()
    for message in dead:
        source = (
            _header(message, "inferq.source.topic"),
            int(_header(message, "inferq.source.partition")),
            int(_header(message, "inferq.source.offset")),
        )
        assert source in where_bad, f"dead letter for {source}, which is not a poison record"
        raw, kind, reason = where_bad[source]
        assert (message.value() or b"") == raw, f"dead letter of {kind} does not carry its raw bytes"
        assert reason in _header(message, "inferq.error"), (kind, _header(message, "inferq.error"))
        found.add(source)
    assert found == set(where_bad)
