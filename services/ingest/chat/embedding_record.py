"""From an OpenAI embeddings body and inferq's headers to the request record.

The record of an embeddings request has no messages: its texts are `embedding_input`, its asked
`dimensions` `embedding_dimensions`. Its scenario, tier and deadline come from the same headers as
a completion's (``X-Inferq-Scenario``, ``X-Inferq-Priority``, ``X-Inferq-Deadline-Ms``; the body
has no `metadata`), checked by the rules of ``POST /v1/requests``; the scenario defaults to
`default_scenario` (``chat_embedding``, HIGH; ``memory_embedding`` is LOW). `model` is one of the
embedding models (``inferq`` names the first), written into the record: the dispatcher's tier
models are chat models. `user` becomes the session key, hashed, as for a completion.

Its token cost, for the budget, is the dispatcher's to count (its texts' characters / 4,
``starting.request_cost``): an embedding has no completion tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from starlette.datastructures import Headers

from inferq.ingest.chat.body import AUTO_MODEL, body_error
from inferq.ingest.chat.errors import ModelNotFoundError
from inferq.ingest.chat.routing import FieldChecks, asked_routing, session_key
from inferq.ingest.record import RecordRules
from inferq.ingest.validation import describe_errors
from inferq.messaging.records import InferenceRequest
from inferq.messaging.tiers import Tier


def embedding_record(
    texts: tuple[str, ...],
    dimensions: int | None,
    user: str | None,
    model: str,
    headers: Headers,
    rules: RecordRules,
    *,
    models: Sequence[str],
    default_scenario: str,
    request_id: str,
    tenant: str,
    max_tier: Tier | None,
    max_deadline_ms: int | None,
) -> InferenceRequest:
    """The record of an embeddings request (its texts already within `embedding_rules`), by `rules`
    for `tenant` within `max_tier` and `max_deadline_ms`; `ChatBodyError` (400) naming the header at
    fault, `ModelNotFoundError` (404) for a model not among `models`."""
    routing = asked_routing(headers)
    if model == AUTO_MODEL:
        model = models[0]
    elif model not in models:
        raise ModelNotFoundError()
    checks = FieldChecks()
    scenario = routing.scenario_checked(checks, default_scenario)
    deadline_ms, tier = routing.deadline_and_tier_checked(checks)
    if checks.problems:
        raise body_error(describe_errors(checks.problems), routing.sources)
    session_id = session_key(user)
    record = rules.record(
        scenario=scenario,
        messages=(),
        tenant=tenant,
        priority=tier,
        deadline_ms=deadline_ms,
        max_tier=max_tier,
        max_deadline_ms=max_deadline_ms,
        request_id=request_id,
        session_id=session_id,
        model=model,
    )
    return replace(record, embedding_input=texts, embedding_dimensions=dimensions)
