"""From a request record to one the broker acknowledged: admission, idempotency, then the produce.

Admission (the tier's, then the tenant's share of it) runs inside the idempotent step: a resend of
an accepted request gets its first answer even when the tier has filled up since, and a refused
attempt is forgotten, so the client's retry after Retry-After is weighed afresh. Idempotency is
per tenant: the key is (the record's tenant, the client's request_id). Each record is signed
with the tenants file's current ``[service] record_keys`` (`inferq.messaging.record_signing`): the
dispatcher believes the tenant of a record ingest wrote because of it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import SecretStr

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.backlog import AdmittedSinceRead, BacklogSnapshot, BacklogSource
from inferq.ingest.backlog_watch import BacklogAlarm
from inferq.ingest.errors import (
    InvalidRequestError,
    OverCapacityError,
    QueueUnavailableError,
    RecordTooLargeError,
    TenantOverShareError,
)
from inferq.ingest.idempotency import Answer, IdempotencyCache
from inferq.ingest.metrics import IngestMetrics
from inferq.ingest.record_limit import RecordLimit, is_too_large
from inferq.ingest.tenant_shares import BacklogShares
from inferq.messaging.codec import TypedCodec
from inferq.messaging.producer import ProduceError
from inferq.messaging.record_signing import RecordSigner
from inferq.messaging.records import InferenceRequest
from inferq.messaging.topics import TopicNames
from inferq.tracing import MESSAGE_ID

log = logging.getLogger("inferq.ingest")


class RequestProducer(Protocol):
    """What the publisher needs of a producer: one record, awaited until the broker acknowledged it
    (`inferq.messaging.producer.AsyncProducer`)."""

    async def produce(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
        timeout_s: float | None = None,
    ) -> Any: ...


class TenantBook(Protocol):
    """What the publisher needs of the tenants in force (`inferq.tenancy.registry.TenantRegistry`)."""

    def weights(self) -> Mapping[str, float] | None: ...

    def label(self, tenant: str) -> str: ...

    def service_record_keys(self) -> tuple[SecretStr, ...]: ...


class Publisher:
    """Admits, deduplicates and produces one request; answers what the 202 body says.

    The record is encoded first: over `record_limit` it raises `RecordTooLargeError` (413) before
    anything else. `ack_timeout_s` bounds the wait for the broker's acknowledgement; past it, or
    when the broker refuses the record, `publish` raises `QueueUnavailableError` (a refusal for
    size is `RecordTooLargeError` still). A full tier raises `OverCapacityError`, a tenant over its
    share of it `TenantOverShareError` (never in open mode: `tenants.weights()` is None). Each new
    record counts once in `inferq_ingest_accepted_total`, labelled `tenants.label(tenant)`. A record
    goes to its tier's topic (`topics.requests`).
    """

    def __init__(
        self,
        *,
        producer: RequestProducer,
        topics: TopicNames,
        codec: TypedCodec[InferenceRequest],
        backlogs: BacklogSource,
        admission: AdmissionPolicy,
        alarm: BacklogAlarm,
        recent_ids: IdempotencyCache,
        metrics: IngestMetrics,
        ack_timeout_s: float,
        record_limit: RecordLimit,
        tenants: TenantBook,
        shares: BacklogShares,
    ) -> None:
        self._producer = producer
        self._topics = topics
        self._codec = codec
        self._backlogs = backlogs
        self._admission = admission
        self._alarm = alarm
        self._recent_ids = recent_ids
        self._metrics = metrics
        self._ack_timeout_s = ack_timeout_s
        self._record_limit = record_limit
        self._tenants = tenants
        self._shares = shares
        self._since_read = AdmittedSinceRead()
        self._signer = RecordSigner(tenants.service_record_keys)

    async def publish(self, request: InferenceRequest, *, idempotency_key: str | None) -> tuple[Answer, bool]:
        """Returns (answer, replayed); replayed means the answer of an earlier request with this key.

        `idempotency_key` is the client's own request_id; None when ingest made the id up.
        """
        value = self.encode(request)
        try:
            if idempotency_key is None:
                return await self._admit_and_produce(request, value), False
            return await self._recent_ids.once(
                (request.tenant, idempotency_key), lambda: self._admit_and_produce(request, value)
            )
        except (ProduceError, TimeoutError) as exc:
            if is_too_large(exc):
                # The topic's limit changed since start-up: still the client's record, not an outage.
                raise RecordTooLargeError(
                    len(request.key) + len(value), self._record_limit.max_record_bytes
                ) from exc
            log.warning("produce failed, answering 503: %s", exc)
            raise QueueUnavailableError(request.tier, str(exc)) from exc

    def encode(self, request: InferenceRequest) -> bytes:
        """The record's bytes; `RecordTooLargeError` when Kafka would refuse them for size."""
        try:
            value = self._codec.encode(request)
        except (ValueError, TypeError, OverflowError) as exc:
            # Validation bounds every field to its Avro type; reaching here is a gap in them, and a
            # 422 (with the detail in the log, no field value) beats a 500.
            # Not log.exception: fastavro's message and traceback may quote the value (a prompt).
            log.error(  # noqa: TRY400
                "request %s cannot be encoded: %s", request.request_id, type(exc).__name__
            )
            problems = [{"field": "body", "problem": "cannot be encoded as a request record"}]
            raise InvalidRequestError(problems, reason="unencodable") from exc
        if not self._record_limit.fits(request.key, value):
            raise RecordTooLargeError(len(request.key) + len(value), self._record_limit.max_record_bytes)
        return value

    def admit(self, request: InferenceRequest) -> BacklogSnapshot:
        """Raises `OverCapacityError` when the request's tier may not grow (unless its tenant is
        below its share of it: `BacklogShares.keeps_room`), `TenantOverShareError` when its tenant
        may not grow its part of it; feeds the alarm. Both weigh the backlog read
        plus this ingest's admissions since the read. An admitted request is counted at once (no
        await between the decision and the count, so concurrent requests see each other); the
        snapshot it was counted against is returned for `withdrawn` should its produce fail."""
        snapshot = self._backlogs.snapshot()
        self._alarm.observe(snapshot)
        # The lag read plus this ingest's admissions since (`AdmittedSinceRead`).
        backlogs = self._since_read.backlogs(snapshot)
        tier, tenant = request.tier, request.tenant
        weights = self._tenants.weights()
        refusal = self._admission.decide(tier, backlogs)
        if refusal is not None and not (
            weights is not None
            and refusal.full_tier is tier
            and self._shares.keeps_room(tenant, tier, refusal.backlog, weights)
        ):
            raise OverCapacityError(refusal)
        if weights is not None:
            over = self._shares.decide(tenant, tier, backlogs.get(tier), weights)
            if over is not None:
                raise TenantOverShareError(over)
        self._since_read.admitted(snapshot, request.tier)
        return snapshot

    async def _admit_and_produce(self, request: InferenceRequest, value: bytes) -> Answer:
        counted_against = self.admit(request)
        MESSAGE_ID.set(request.request_id)  # the send span's message id, when tracing is on
        try:
            await self._producer.produce(
                self._topics.requests(request.tier),
                value,
                key=request.key,
                headers=self._signer.headers(request.key, value),
                timeout_s=self._ack_timeout_s,
            )
        except BaseException:
            self._since_read.withdrawn(counted_against, request.tier)
            raise
        tenant = request.tenant
        if self._tenants.weights() is not None:
            self._shares.accepted(tenant, request.tier)
        self._metrics.accepted(request.tier, self._tenants.label(tenant))
        return {
            "request_id": request.request_id,
            "tier": request.tier.value,
            "expire_at_ms": request.expire_at_ms,
        }
