"""Turns a validated submission into the Avro `InferenceRequest` record, its key and its topic."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from inferq.ingest.deadlines import FieldRefusedError, expire_at_ms
from inferq.ingest.validation import SubmitRequest
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.reply_topics import is_allowed_reply_topic, reply_topic_rule
from inferq.messaging.tiers import Tier, TierPolicy
from inferq.messaging.topics import TopicNames


class ReplyTopicRefusedError(FieldRefusedError):
    """`reply_to` names a topic that is not one of the pipeline's reply topics."""

    field = "reply_to"
    reason = "reply_to_refused"


@dataclass(frozen=True)
class Envelope:
    """A request and the topic it goes to."""

    topic: str
    request: InferenceRequest

    @property
    def key(self) -> bytes:
        return self.request.key

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def tier(self) -> Tier:
        return self.request.tier


def build_envelope(
    body: SubmitRequest,
    *,
    now_ms: int,
    policy: TierPolicy,
    deadlines_ms: Mapping[Tier, int],
    topics: TopicNames,
    region: str,
    tenant: str | None = None,
    max_tier: Tier | None = None,
    max_deadline_ms: int | None = None,
    default_reply_to: str | None = None,
) -> Envelope:
    """The record `body` becomes at `now_ms`: its tier from `policy` (lowered to `max_tier`), its
    deadline (the caller's `expire_at_ms`, else now plus the caller's `deadline_ms` or the tier's,
    the tier's cut to `max_deadline_ms`), its topic, its key, its `tenant` (the body's when None) and
    its `reply_to` (the body's, else `default_reply_to`: a regional ingest's reply topic).
    The tier is lowered before the deadline is chosen, so a lowered request gets its new tier's.

    Raises a `FieldRefusedError`: `DeadlineInPastError` when the caller's `expire_at_ms` is not in
    the future, `DeadlineTooFarError` when it is more than `MAX_DEADLINE_MS` ahead,
    `ReplyTopicRefusedError` when `reply_to` is not an allowed reply topic
    (`inferq.messaging.reply_topics`).
    """
    tier = policy.tier_for(body.scenario, body.priority)
    if max_tier is not None and tier.rank < max_tier.rank:
        tier = max_tier
    if body.reply_to is not None and not is_allowed_reply_topic(body.reply_to, topics):
        raise ReplyTopicRefusedError(reply_topic_rule(topics))
    expire_at = expire_at_ms(
        now_ms,
        asked_expire_at_ms=body.expire_at_ms,
        asked_deadline_ms=body.deadline_ms,
        tier_deadline_ms=deadlines_ms[tier],
        max_deadline_ms=max_deadline_ms,
    )
    request = InferenceRequest(
        request_id=body.request_id or str(uuid.uuid4()),
        tenant=body.tenant if tenant is None else tenant,
        origin_region=region,
        scenario=body.scenario,
        tier=tier,
        created_at_ms=now_ms,
        expire_at_ms=expire_at,
        estimated_tokens=body.estimated_tokens,
        reply_to=body.reply_to or default_reply_to,
        # One session's requests share a partition (the key) so a user's chat stays in order.
        session_id=body.session_id,
        model=body.model,
        messages=tuple(ChatMessage(m.role, m.content) for m in body.messages),
        params=_encoded_params(body),
        callback_url=body.callback_url,
        stream=body.stream,
    )
    return Envelope(topic=topics.requests(tier), request=request)


def _encoded_params(body: SubmitRequest) -> dict[str, str] | None:
    """The record's `params`: each allowed parameter set, JSON-encoded; None when none is set."""
    values = body.params.as_json_values() if body.params is not None else {}
    return {name: json.dumps(value) for name, value in values.items()} or None


@dataclass(frozen=True)
class EnvelopeFactory:
    """`build_envelope` with one service's tier policy, deadlines, topics and region bound; the clock
    is read once per request. Raises `FieldRefusedError` like `build_envelope`."""

    policy: TierPolicy
    deadlines_ms: Mapping[Tier, int]
    topics: TopicNames
    region: str
    clock_ms: Callable[[], int]
    # A regional ingest's reply topic, for requests that name none (None: the results topic).
    default_reply_to: str | None = None

    def __call__(
        self,
        body: SubmitRequest,
        *,
        tenant: str | None = None,
        max_tier: Tier | None = None,
        max_deadline_ms: int | None = None,
    ) -> Envelope:
        return build_envelope(
            body,
            now_ms=self.clock_ms(),
            policy=self.policy,
            deadlines_ms=self.deadlines_ms,
            topics=self.topics,
            region=self.region,
            tenant=tenant,
            max_tier=max_tier,
            max_deadline_ms=max_deadline_ms,
            default_reply_to=self.default_reply_to,
        )
