"""The ingest ASGI app: ``POST /v1/requests``, ``GET /v1/backlog``, ``GET /healthz``, ``GET /metrics``.

A request is answered 202 only after the broker acknowledged the record (acks=all), so a 202 is a
promise the pipeline keeps. Refusals name the field: 400 for a body that is not JSON, 413 for a
body over the limit, 422 for a body that breaks the contract, 429 with Retry-After when the
request's tier (or, for LOW, any tier) is at its backlog capacity (see `admission`), 503 when Kafka
does not acknowledge within the bounded produce timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.ingest.admission import FillAlarm, Refusal
from services.ingest.backlog import BacklogSnapshot, BacklogSource, KafkaBacklogReader
from services.ingest.envelope import DeadlineInPastError, Envelope, build_envelope
from services.ingest.idempotency import Answer, IdempotencyCache
from services.ingest.settings import IngestSettings
from services.ingest.validation import SubmitRequest, describe
from services.messaging.admin import require_topics
from services.messaging.codec import request_codec
from services.messaging.producer import AsyncProducer, ProduceError
from services.messaging.tiers import TIERS_BY_PRIORITY, Tier, TierPolicy
from services.telemetry import meter, metrics_endpoint

log = logging.getLogger("inferq.ingest")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class BodyTooLargeError(Exception):
    pass


class OverCapacityError(Exception):
    """Raised inside the idempotent publish so a refused attempt is not remembered as an answer."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, message: str, problems: list[dict[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if problems:
        body["problems"] = problems
    return JSONResponse(body, status_code=status)


def create_app(
    settings: IngestSettings,
    *,
    producer: AsyncProducer | None = None,
    clock_ms: Callable[[], int] = _now_ms,
    check_topics: bool = True,
    backlog: BacklogSource | None = None,
) -> Starlette:
    """Composition root of ingest.

    `producer` and `backlog` (the source of per-tier backlogs admission weighs) may be injected
    (tests); otherwise they are built here from `settings`, a `KafkaBacklogReader` of the group
    `settings.dispatcher_group`. Both are started and stopped by the app's lifespan.
    """
    topics = settings.kafka.topics
    policy = TierPolicy(scenario_tiers=settings.scenario_tiers)
    codec = request_codec()
    kafka_producer = producer or AsyncProducer(
        settings.kafka.producer_config(client_id="inferq-ingest")
        | {"message.timeout.ms": int(settings.produce_timeout_s * 1000)}
    )
    backlogs = backlog or KafkaBacklogReader(
        settings.kafka,
        settings.dispatcher_group,
        refresh_interval_s=settings.backlog_refresh_s,
        timeout_s=settings.backlog_timeout_s,
    )
    admission = settings.admission_policy()
    alarm = FillAlarm(threshold=settings.backlog_alert_ratio)
    seen = IdempotencyCache(settings.idempotency_cache_size)
    m = meter("inferq.ingest")
    accepted = m.create_counter("inferq_ingest_accepted_total", description="requests written to Kafka")
    refused = m.create_counter("inferq_ingest_refused_total", description="requests refused, by reason")

    def observe_backlog(_: CallbackOptions) -> Iterable[Observation]:
        snapshot = backlogs.snapshot()
        # An unknown backlog is left out rather than reported as an empty queue.
        return [Observation(n, {"tier": t.value}) for t, n in snapshot.backlogs.items() if n is not None]

    def observe_fill(_: CallbackOptions) -> Iterable[Observation]:
        snapshot = backlogs.snapshot()
        ratios = ((t, admission.fill_ratio(t, snapshot.backlogs.get(t))) for t in Tier)
        return [Observation(r, {"tier": t.value}) for t, r in ratios if r is not None]

    m.create_observable_gauge(
        "inferq_backlog", [observe_backlog], description="dispatcher group lag per tier, in records"
    )
    m.create_observable_gauge(
        "inferq_backlog_fill_ratio", [observe_fill], description="backlog over capacity per tier (1 = full)"
    )

    def watch(snapshot: BacklogSnapshot) -> None:
        """Log each tier once when it rises above the alert ratio, and once when it is back below."""
        rose, fell = alarm.observe({t: admission.fill_ratio(t, snapshot.backlogs.get(t)) for t in Tier})
        for tier in rose:
            log.warning(
                "tier %s backlog above %.0f%% of capacity (backlog %s, capacity %d): LOW is shed first",
                tier,
                settings.backlog_alert_ratio * 100,
                snapshot.backlogs.get(tier),
                admission.capacity[tier],
            )
        for tier in fell:
            log.info(
                "tier %s backlog back under %.0f%% of capacity", tier, settings.backlog_alert_ratio * 100
            )

    def admit(tier: Tier) -> None:
        snapshot = backlogs.snapshot()
        watch(snapshot)
        refusal = admission.decide(tier, snapshot.backlogs)
        if refusal is not None:
            raise OverCapacityError(refusal)

    async def admit_and_publish(envelope: Envelope) -> Answer:
        admit(envelope.tier)
        return await publish(envelope)

    async def publish(envelope: Envelope) -> Answer:
        await kafka_producer.produce(
            envelope.topic,
            codec.encode(envelope.request),
            key=envelope.key,
            # The produce timeout is enforced by librdkafka (message.timeout.ms); this bound is a backstop.
            timeout_s=settings.produce_timeout_s + 1.0,
        )
        accepted.add(1, {"tier": envelope.tier.value})
        return {
            "request_id": envelope.request_id,
            "tier": envelope.tier.value,
            "expire_at_ms": envelope.request.expire_at_ms,
        }

    async def submit(request: Request) -> Response:
        try:
            raw = await _read_body(request, settings.max_body_bytes)
        except BodyTooLargeError:
            refused.add(1, {"reason": "too_large"})
            return _error(413, f"body larger than {settings.max_body_bytes} bytes")
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            refused.add(1, {"reason": "malformed"})
            return _error(400, f"body is not valid JSON: {exc}")
        if not isinstance(data, dict):
            refused.add(1, {"reason": "malformed"})
            return _error(400, "body must be a JSON object")
        try:
            body = SubmitRequest.model_validate(data)
            envelope = build_envelope(
                body,
                now_ms=clock_ms(),
                policy=policy,
                deadlines_ms=settings.deadlines_ms,
                topics=topics,
                region=settings.region,
            )
        except ValidationError as exc:
            refused.add(1, {"reason": "invalid"})
            problems = describe(exc)
            summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
            return _error(422, f"invalid request: {summary}", problems)
        except DeadlineInPastError as exc:
            refused.add(1, {"reason": "deadline_past"})
            return _error(
                422, f"invalid request: expire_at_ms: {exc}", [{"field": "expire_at_ms", "problem": str(exc)}]
            )
        try:
            # Admission runs inside `once`: a resend of an accepted request gets its first answer even
            # when the tier has filled up since, and a refused attempt is forgotten.
            if body.request_id is None:
                answer, replayed = await admit_and_publish(envelope), False
            else:
                answer, replayed = await seen.once(body.request_id, lambda: admit_and_publish(envelope))
        except OverCapacityError as exc:
            refusal = exc.refusal
            refused.add(1, {"reason": "over_capacity", "tier": envelope.tier.value})
            return JSONResponse(
                refusal.body(), status_code=429, headers={"Retry-After": str(refusal.retry_after_s)}
            )
        except (ProduceError, TimeoutError) as exc:
            refused.add(1, {"reason": "kafka_unavailable", "tier": envelope.tier.value})
            log.warning("produce failed, answering 503: %s", exc)
            return JSONResponse(
                {"error": f"queue unavailable, retry later: {exc}"},
                status_code=503,
                headers={"Retry-After": "1"},
            )
        return JSONResponse(answer | {"duplicate": replayed}, status_code=202)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def backlog_view(_: Request) -> Response:
        snapshot = backlogs.snapshot()
        view: dict[str, dict[str, Any]] = {}
        for tier in TIERS_BY_PRIORITY:
            lag = snapshot.backlogs.get(tier)
            ratio = admission.fill_ratio(tier, lag)
            view[tier.value] = {
                "backlog": lag,
                "capacity": admission.capacity[tier],
                "fill_ratio": None if ratio is None else round(ratio, 4),
                "refreshed_at_ms": snapshot.refreshed_at_ms,
                "known": lag is not None,
            }
        return JSONResponse(view)

    async def watch_loop() -> None:
        # Backlog also grows from producers writing to Kafka directly, so the alert cannot wait for
        # an HTTP request to notice it.
        while True:
            watch(backlogs.snapshot())
            await asyncio.sleep(settings.backlog_refresh_s)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if check_topics:
            await asyncio.to_thread(require_topics, settings.kafka, topics.all_requests)
        await kafka_producer.start()
        await backlogs.start()
        watcher = asyncio.create_task(watch_loop(), name="ingest-backlog-watch")
        log.info(
            "ingest ready, producing to %s; admission %s, capacities %s",
            settings.kafka.bootstrap_servers,
            "on" if admission.enabled else "off",
            {t.value: c for t, c in admission.capacity.items()},
        )
        try:
            yield
        finally:
            watcher.cancel()
            await asyncio.wait({watcher}, timeout=1.0)
            await backlogs.stop()
            # Stop accepting is uvicorn's job; here every record already handed to librdkafka is flushed.
            left = await kafka_producer.stop(flush_timeout_s=10.0)
            if left:
                log.error("%d records not acknowledged at shutdown", left)

    return Starlette(
        routes=[
            Route("/v1/requests", submit, methods=["POST"]),
            Route("/v1/backlog", backlog_view, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
