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

import hashlib
from collections.abc import Sequence
from dataclasses import replace

from starlette.datastructures import Headers

from inferq.ingest.chat.body import AUTO_MODEL, body_error
from inferq.ingest.chat.errors import ChatBodyError, ModelNotFoundError
from inferq.ingest.chat.record import (
    HEADER_DEADLINE,
    HEADER_PRIORITY,
    HEADER_SCENARIO,
    _Bounds,
    _choice,
    _rule,
)
from inferq.ingest.record import RecordRules
from inferq.ingest.validation import SubmitRequest, describe_errors
from inferq.messaging import limits
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
    sources: dict[str, str] = {}
    scenario = _choice(headers, None, HEADER_SCENARIO, "", "scenario", sources)
    priority = _choice(headers, None, HEADER_PRIORITY, "", "priority", sources)
    if priority is not None and priority.isascii():
        priority = priority.upper()
    deadline = _choice(headers, None, HEADER_DEADLINE, "", "deadline_ms", sources)
    if deadline is not None and not (deadline.isascii() and deadline.isdigit() and len(deadline) <= 12):
        raise ChatBodyError(
            f"must be a whole number of milliseconds, 1 to {limits.MAX_DEADLINE_MS}", param=HEADER_DEADLINE
        )
    if model == AUTO_MODEL:
        model = models[0]
    elif model not in models:
        raise ModelNotFoundError()
    bounds = _Bounds()
    scenario = bounds.check(("scenario",), _rule(SubmitRequest, "scenario"), scenario or default_scenario)
    deadline_ms = bounds.check(
        ("deadline_ms",), _rule(SubmitRequest, "deadline_ms"), None if deadline is None else int(deadline)
    )
    tier = bounds.check(("priority",), _rule(SubmitRequest, "priority"), priority)
    if bounds.problems:
        raise body_error(describe_errors(bounds.problems), sources)
    session_id = None
    if user:
        session_id = "u-" + hashlib.sha256(user.encode("utf-8", "surrogatepass")).hexdigest()[:40]
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
