"""The Avro `InferenceRequest` record a parsed body becomes, by one service's rules.

A request has two shapes in ingest: its parsed body (`validation.SubmitRequest` for
``POST /v1/requests``, `chat.body.ChatCompletionBody` for ``POST /v1/chat/completions``) and this
record. `RecordRules.record` gives a record its tier, deadline, tenant and reply topic; the rest is
what the body asked, as it asked it. The topic a record goes to is its tier's
(`TopicNames.requests`), so a tier lowered later (the tenant's entitlements) moves it with it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from inferq.ingest import deadlines
from inferq.ingest.deadlines import FieldRefusedError
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
class RecordRules:
    """One service's tier policy, tier deadlines, topics, region and clock (read once per record)."""

    policy: TierPolicy
    deadlines_ms: Mapping[Tier, int]
    topics: TopicNames
    region: str
    clock_ms: Callable[[], int]
    # A regional ingest's reply topic, for requests that name none (None: the results topic).
    default_reply_to: str | None = None

    def record(
        self,
        *,
        scenario: str,
        messages: tuple[ChatMessage, ...],
        tenant: str,
        priority: Tier | None = None,
        deadline_ms: int | None = None,
        expire_at_ms: int | None = None,
        reply_to: str | None = None,
        max_tier: Tier | None = None,
        max_deadline_ms: int | None = None,
        request_id: str | None = None,
        session_id: str | None = None,
        model: str | None = None,
        params: dict[str, str] | None = None,
        callback_url: str | None = None,
        stream: bool = False,
        estimated_tokens: int | None = None,
    ) -> InferenceRequest:
        """The record asked for, now: its tier from the policy (`priority` wins over the scenario's,
        lowered to `max_tier`), its deadline (`expire_at_ms`, else now plus `deadline_ms` or the
        tier's, the tier's cut to `max_deadline_ms`), its `reply_to` (else `default_reply_to`) and
        its id (`request_id`, else a new uuid). The tier is lowered before the deadline is chosen, so
        a lowered request gets its new tier's.

        Raises a `FieldRefusedError`: `DeadlineInPastError` when `expire_at_ms` is not in the future,
        `DeadlineTooFarError` when it is more than `MAX_DEADLINE_MS` ahead, `ReplyTopicRefusedError`
        when `reply_to` is not an allowed reply topic (`inferq.messaging.reply_topics`).
        """
        now_ms = self.clock_ms()
        tier = self.policy.tier_for(scenario, priority)
        if max_tier is not None and tier.rank < max_tier.rank:
            tier = max_tier
        if reply_to is not None and not is_allowed_reply_topic(reply_to, self.topics):
            raise ReplyTopicRefusedError(reply_topic_rule(self.topics))
        expire_at = deadlines.expire_at_ms(
            now_ms,
            asked_expire_at_ms=expire_at_ms,
            asked_deadline_ms=deadline_ms,
            tier_deadline_ms=self.deadlines_ms[tier],
            max_deadline_ms=max_deadline_ms,
        )
        return InferenceRequest(
            request_id=request_id or str(uuid.uuid4()),
            tenant=tenant,
            origin_region=self.region,
            scenario=scenario,
            tier=tier,
            created_at_ms=now_ms,
            expire_at_ms=expire_at,
            estimated_tokens=estimated_tokens,
            reply_to=reply_to or self.default_reply_to,
            # One session's requests share a partition (the key) so a user's chat stays in order.
            session_id=session_id,
            model=model,
            messages=messages,
            params=params,
            callback_url=callback_url,
            stream=stream,
        )


def submitted_record(
    body: SubmitRequest,
    rules: RecordRules,
    *,
    tenant: str | None = None,
    max_tier: Tier | None = None,
    max_deadline_ms: int | None = None,
) -> InferenceRequest:
    """The record of a ``POST /v1/requests`` body (its `tenant` unless one is given), by `rules`;
    raises `FieldRefusedError` like `RecordRules.record`."""
    values = body.params.as_json_values() if body.params is not None else {}
    return rules.record(
        scenario=body.scenario,
        messages=tuple(m.as_record() for m in body.messages),
        tenant=body.tenant if tenant is None else tenant,
        priority=body.priority,
        deadline_ms=body.deadline_ms,
        expire_at_ms=body.expire_at_ms,
        reply_to=body.reply_to,
        max_tier=max_tier,
        max_deadline_ms=max_deadline_ms,
        request_id=body.request_id,
        session_id=body.session_id,
        model=body.model,
        params=encoded_params(values),
        callback_url=body.callback_url,
        stream=body.stream,
        estimated_tokens=body.estimated_tokens,
    )


def encoded_params(values: Mapping[str, Any]) -> dict[str, str] | None:
    """The record's `params`: each parameter set, JSON-encoded; None when none is set."""
    return {name: json.dumps(value) for name, value in values.items()} or None
