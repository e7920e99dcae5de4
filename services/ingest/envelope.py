"""Turns a validated submission into the Avro `InferenceRequest` record, its key and its topic."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from services.ingest.validation import SubmitRequest
from services.messaging.tiers import Tier, TierPolicy
from services.messaging.topics import TopicNames


class DeadlineInPastError(ValueError):
    """The caller's absolute deadline has already passed: nobody would wait for the answer."""


@dataclass(frozen=True)
class Envelope:
    topic: str
    key: bytes
    record: dict[str, Any]

    @property
    def request_id(self) -> str:
        return str(self.record["request_id"])

    @property
    def tier(self) -> Tier:
        return Tier(self.record["tier"])


def build_envelope(
    body: SubmitRequest,
    *,
    now_ms: int,
    policy: TierPolicy,
    deadlines_ms: dict[Tier, int],
    topics: TopicNames,
    region: str,
) -> Envelope:
    tier = policy.tier_for(body.scenario, body.priority)
    if body.expire_at_ms is not None:
        if body.expire_at_ms <= now_ms:
            raise DeadlineInPastError(
                f"expire_at_ms {body.expire_at_ms} is {now_ms - body.expire_at_ms} ms ago"
            )
        expire_at_ms = body.expire_at_ms
    else:
        expire_at_ms = now_ms + (body.deadline_ms or deadlines_ms[tier])
    request_id = body.request_id or str(uuid.uuid4())
    record: dict[str, Any] = {
        "request_id": request_id,
        "tenant": body.tenant,
        "origin_region": region,
        "scenario": body.scenario,
        "tier": tier.value,
        "created_at_ms": now_ms,
        "expire_at_ms": expire_at_ms,
        "attempt": 1,
        "estimated_tokens": body.estimated_tokens,
        "reply_to": body.reply_to,
        "session_id": body.session_id,
        "model": body.model,
        "messages": [{"role": m.role, "content": m.content} for m in body.messages],
        "params": {k: json.dumps(v) for k, v in body.params.items()} if body.params else None,
        "not_before_ms": None,
    }
    # One session's requests share a partition so a user's chat stays in order.
    key = (body.session_id or request_id).encode()
    return Envelope(topic=topics.requests(tier), key=key, record=record)
