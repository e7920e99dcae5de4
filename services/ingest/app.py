"""The ingest ASGI app: ``POST /v1/requests``, ``GET /healthz``, ``GET /metrics``.

A request is answered 202 only after the broker acknowledged the record (acks=all), so a 202 is a
promise the pipeline keeps. Refusals name the field: 400 for a body that is not JSON, 413 for a
body over the limit, 422 for a body that breaks the contract, 503 when Kafka does not acknowledge
within the bounded produce timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.ingest.envelope import DeadlineInPastError, Envelope, build_envelope
from services.ingest.idempotency import Answer, IdempotencyCache
from services.ingest.settings import IngestSettings
from services.ingest.validation import SubmitRequest, describe
from services.messaging.admin import require_topics
from services.messaging.codec import request_codec
from services.messaging.producer import AsyncProducer, ProduceError
from services.messaging.tiers import TierPolicy
from services.telemetry import meter, metrics_endpoint

log = logging.getLogger("inferq.ingest")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class BodyTooLargeError(Exception):
    pass


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
) -> Starlette:
    """Composition root of ingest. `producer` may be injected (tests); otherwise built here."""
    topics = settings.kafka.topics
    policy = TierPolicy(scenario_tiers=settings.scenario_tiers)
    codec = request_codec()
    kafka_producer = producer or AsyncProducer(
        settings.kafka.producer_config(client_id="inferq-ingest")
        | {"message.timeout.ms": int(settings.produce_timeout_s * 1000)}
    )
    seen = IdempotencyCache(settings.idempotency_cache_size)
    m = meter("inferq.ingest")
    accepted = m.create_counter("inferq_ingest_accepted_total", description="requests written to Kafka")
    refused = m.create_counter("inferq_ingest_refused_total", description="requests refused, by reason")

    async def publish(envelope: Envelope) -> Answer:
        await kafka_producer.produce(
            envelope.topic,
            codec.encode(envelope.record),
            key=envelope.key,
            # The produce timeout is enforced by librdkafka (message.timeout.ms); this bound is a backstop.
            timeout_s=settings.produce_timeout_s + 1.0,
        )
        accepted.add(1, {"tier": envelope.tier.value})
        return {
            "request_id": envelope.request_id,
            "tier": envelope.tier.value,
            "expire_at_ms": envelope.record["expire_at_ms"],
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
            if body.request_id is None:
                answer, replayed = await publish(envelope), False
            else:
                answer, replayed = await seen.once(body.request_id, lambda: publish(envelope))
        except (ProduceError, TimeoutError) as exc:
            refused.add(1, {"reason": "kafka_unavailable"})
            log.warning("produce failed, answering 503: %s", exc)
            return JSONResponse(
                {"error": f"queue unavailable, retry later: {exc}"},
                status_code=503,
                headers={"Retry-After": "1"},
            )
        return JSONResponse(answer | {"duplicate": replayed}, status_code=202)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if check_topics:
            await asyncio.to_thread(require_topics, settings.kafka, topics.all_requests)
        await kafka_producer.start()
        log.info("ingest ready, producing to %s", settings.kafka.bootstrap_servers)
        try:
            yield
        finally:
            # Stop accepting is uvicorn's job; here every record already handed to librdkafka is flushed.
            left = await kafka_producer.stop(flush_timeout_s=10.0)
            if left:
                log.error("%d records not acknowledged at shutdown", left)

    return Starlette(
        routes=[
            Route("/v1/requests", submit, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
