"""The two ways a load run reaches the pipeline: HTTP ingest, or straight onto the tier topics.

Both turn an `Arrival` into the same ``POST /v1/requests`` body. Over Kafka the body is validated by
ingest's own model and made a record by ingest's own `submitted_record`, so a record written by loadgen is
the record ingest would have written (tier, deadline, key by session), minus admission control.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self

import httpx

from inferq.client.kafka import producer_signer
from inferq.clock import wall_ms
from inferq.ingest.record import RecordRules, submitted_record
from inferq.ingest.validation import SubmitRequest
from inferq.messaging.admin import require_topics
from inferq.messaging.codec import request_codec
from inferq.messaging.errors import MessagingError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.producer import AsyncProducer, ProduceError
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, TierPolicy
from inferq.tools.loadtest.errors import LoadtestError
from inferq.tools.traces.arrival import Arrival

HEALTH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Answer:
    outcome: str  # accepted, refused, unavailable or error
    status: int | None = None
    answer_tier: str | None = None
    expire_at_ms: int | None = None
    retry_after_s: float | None = None
    error: str | None = None


class Sender(Protocol):
    async def send(self, arrival: Arrival, request_id: str) -> Answer: ...


def http_body(arrival: Arrival, request_id: str) -> dict[str, Any]:
    """The ingest API body of one arrival; optional fields only when the scenario sets them."""
    body: dict[str, Any] = {
        "scenario": arrival.scenario,
        "messages": arrival.message_dicts(),
        "session_id": arrival.session_id,
        "request_id": request_id,
        "tenant": arrival.tenant,
        "estimated_tokens": arrival.estimated_tokens,
        "params": {"max_tokens": arrival.max_tokens},
    }
    if arrival.deadline_ms is not None:
        body["deadline_ms"] = arrival.deadline_ms
    if arrival.priority is not None:
        body["priority"] = arrival.priority.value
    if arrival.model is not None:
        body["model"] = arrival.model
    return body


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return float(response.headers["retry-after"])
    except (KeyError, ValueError):
        return None


class HttpSender:
    """POSTs to ingest with at most `max_connections` connections (the run's concurrency bound).

    The connections are spread over several clients of `CONNECTIONS_PER_CLIENT` each: httpcore's
    pool scans every queued request against every connection on each change, so one client of 64
    connections spends more CPU in that scan than in HTTP (measured: 280 requests/s with one pool
    of 64, over 1,000 with pools of 8, on 2 cores).
    """

    CONNECTIONS_PER_CLIENT = 8

    def __init__(
        self,
        ingest_url: str,
        *,
        max_connections: int,
        timeout_s: float,
        transport: httpx.AsyncBaseTransport | None = None,
        keys: Mapping[str, str] | None = None,
    ) -> None:
        """`keys`: each tenant's API key, sent as its bearer token; None: open mode, the body's
        `tenant` names it."""
        self._keys = keys
        per_client = min(max_connections, self.CONNECTIONS_PER_CLIENT)
        limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        self._url = ingest_url
        self._clients = [
            httpx.AsyncClient(base_url=ingest_url, timeout=timeout_s, limits=limits, transport=transport)
            for _ in range(-(-max_connections // per_client))
        ]
        self._next = itertools.cycle(self._clients)

    async def __aenter__(self) -> Self:
        try:
            response = await self._clients[0].get("/healthz", timeout=HEALTH_TIMEOUT_S)
        except httpx.HTTPError as exc:
            await self._close()
            raise LoadtestError(
                f"ingest at {self._url} does not answer ({type(exc).__name__}): start it first"
            ) from exc
        if response.status_code != 200:
            await self._close()
            raise LoadtestError(
                f"ingest at {self._url} is not healthy: {response.status_code} {response.text[:200]}"
            )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._clients))

    async def send(self, arrival: Arrival, request_id: str) -> Answer:
        client = next(self._next)
        try:
            headers = {"authorization": f"Bearer {self._keys[arrival.tenant]}"} if self._keys else None
            response = await client.post("/v1/requests", json=http_body(arrival, request_id), headers=headers)
        except httpx.HTTPError as exc:
            return Answer("error", error=f"{type(exc).__name__}: {exc}"[:300])
        code = response.status_code
        if code == 202:
            answer = response.json()
            return Answer("accepted", code, answer.get("tier"), answer.get("expire_at_ms"))
        outcome = {429: "refused", 503: "unavailable"}.get(code, "error")
        return Answer(outcome, code, retry_after_s=_retry_after(response), error=response.text[:300])


class KafkaSender:
    """Produces each request to its tier topic and awaits the broker's acknowledgement (acks=all),
    signed with the tenant's record key from ``$INFERQ_RECORD_KEY`` when set (a dispatcher with a
    tenants file refuses unsigned records; docs/tenants.md, "Records written to Kafka")."""

    def __init__(self, settings: KafkaSettings, *, timeout_s: float, region: str = "loadgen") -> None:
        self._signer = producer_signer(None)
        self._settings = settings
        self._timeout_s = timeout_s
        self._region = region
        self._policy = TierPolicy()
        self._deadlines = dict(DEFAULT_DEADLINES_MS)
        self._codec = request_codec()
        # Idempotent and acks=all, as ingest's: a counted "accepted" is a durably written record.
        self._producer = AsyncProducer(settings.producer_config(client_id="inferq-loadgen", linger_ms=5))

    async def __aenter__(self) -> Self:
        try:
            await asyncio.to_thread(require_topics, self._settings, self._settings.topics.all_requests)
        except MessagingError as exc:
            raise LoadtestError(str(exc)) from exc
        await self._producer.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._producer.stop(flush_timeout_s=self._timeout_s)

    async def send(self, arrival: Arrival, request_id: str) -> Answer:
        body = SubmitRequest.model_validate(http_body(arrival, request_id))
        rules = RecordRules(
            policy=self._policy,
            deadlines_ms=self._deadlines,
            topics=self._settings.topics,
            region=self._region,
            clock_ms=wall_ms,
        )
        request = submitted_record(body, rules)
        value = self._codec.encode(request)
        topic = self._settings.topics.requests(request.tier)
        try:
            await self._producer.produce(
                topic,
                value,
                key=request.key,
                headers=self._signer.headers(request.key, value),
                timeout_s=self._timeout_s,
            )
        except (ProduceError, TimeoutError) as exc:
            return Answer("error", error=f"{type(exc).__name__}: {exc}"[:300])
        return Answer("accepted", None, request.tier.value, request.expire_at_ms)
