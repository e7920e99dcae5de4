"""From an OpenAI chat-completions body and inferq's headers to the request record.

Every value ingest bounds (the messages' roles and text, the scenario, the tier, the deadline, the
model, `temperature`, `top_p`, `max_tokens`, `stop`, `seed`, the penalties, `response_format`,
`tools`, `tool_choice`, `parallel_tool_calls`, a message's `tool_calls`, `tool_call_id` and `name`,
`n`, `logprobs`, `top_logprobs`) is
checked by the rule of the field that carries it in ``POST /v1/requests`` (`SubmitRequest`,
`Message`, `ChatParams`), value by value, so the two APIs accept exactly the same values and say
the same about the others. A problem is a 400 naming the parameter the way OpenAI does
(``messages[0].role``, ``temperature``) or the header it came from.

inferq's own choices (scenario, tier, deadline) come from its headers or `metadata`
(`inferq.ingest.chat.routing`).

`user` (or `safety_identifier`) becomes the session key, as a hash: one end user's requests stay in
order; both are forwarded too. `metadata` is forwarded without its ``inferq_*`` keys (inferq's
choices above). `max_completion_tokens` is forwarded under its own name. The fields the tenant may
pass through (`ChatCompletionBody.passthrough`) follow the known ones in the record's `params`.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from starlette.datastructures import Headers

from inferq.ingest.chat.body import AUTO_MODEL, ChatCompletionBody, ChatMessageIn, body_error
from inferq.ingest.chat.errors import ChatBodyError, ModelNotFoundError
from inferq.ingest.chat.routing import FieldChecks, asked_routing, field_rule, session_key
from inferq.ingest.record import RecordRules, encoded_params
from inferq.ingest.validation import (
    TOP_LOGPROBS_ALONE,
    ChatParams,
    Message,
    SubmitRequest,
    describe_errors,
)
from inferq.messaging import limits
from inferq.messaging.param_rules import max_tokens_conflict
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier


def chat_record(
    body: ChatCompletionBody,
    headers: Headers,
    rules: RecordRules,
    *,
    models: frozenset[str],
    default_scenario: str,
    request_id: str,
    tenant: str,
    max_tier: Tier | None,
    max_deadline_ms: int | None,
) -> InferenceRequest:
    """The record of `body` and inferq's headers, by `rules` (for `tenant`, within `max_tier` and
    `max_deadline_ms`), queued as `request_id` (its outcome goes to the ingest's default reply topic,
    the one it follows); `ChatBodyError` (400) naming the parameter or header at fault,
    `ModelNotFoundError` (404)."""
    routing = asked_routing(headers, body.metadata)
    model = None if body.model == AUTO_MODEL else body.model
    if model is not None and model not in models:
        raise ModelNotFoundError()
    session_id = session_key(body.safety_identifier or body.user)
    params = _asked_params(body)
    # In the order `SubmitRequest` checks its fields, so the problems are listed as there.
    checks = FieldChecks()
    scenario = routing.scenario_checked(checks, default_scenario)
    messages = tuple(_message(checks, i, m) for i, m in enumerate(body.messages))
    model = checks.check(("model",), field_rule(SubmitRequest, "model"), model)
    deadline_ms, tier = routing.deadline_and_tier_checked(checks)
    checked = {
        name: checks.check(("params", name), field_rule(ChatParams, name), v) for name, v in params.items()
    }
    if checks.problems:
        raise body_error(describe_errors(checks.problems), routing.sources)
    # As JSON values, the way `ChatParams.as_json_values` gives a native body's.
    values = {name: field_rule(ChatParams, name).dump_python(value) for name, value in checked.items()}
    values = {name: value for name, value in values.items() if not limits.at_default(name, value)}
    values |= body.passthrough
    if "tool_choice" in values and "tools" not in values:
        raise ChatBodyError("tool_choice is only allowed with tools", param="tool_choice")
    if "top_logprobs" in values and values.get("logprobs") is not True:
        raise ChatBodyError(TOP_LOGPROBS_ALONE, param="top_logprobs")
    if body.stream_options is not None and not body.stream:
        raise ChatBodyError("stream_options is only allowed when stream is true", param="stream_options")
    return rules.record(
        scenario=scenario,
        messages=messages,
        tenant=tenant,
        priority=tier,
        deadline_ms=deadline_ms,
        max_tier=max_tier,
        max_deadline_ms=max_deadline_ms,
        request_id=request_id,
        session_id=session_id,
        model=model,
        params=encoded_params(values),
        stream=bool(body.stream),
    )


def _asked_params(body: ChatCompletionBody) -> dict[str, Any]:
    """The parameters ingest's `params` takes, as the body gives them, in `ChatParams`' order (the
    record's map keeps it); `metadata` without inferq's own keys (left out when nothing else)."""
    asked = {name: getattr(body, name) for name in ChatParams.model_fields if getattr(body, name) is not None}
    if body.metadata is not None:
        metadata = {k: v for k, v in body.metadata.items() if not k.startswith(limits.INFERQ_METADATA_PREFIX)}
        if metadata:
            asked["metadata"] = metadata
        else:
            del asked["metadata"]
    problem = max_tokens_conflict(asked.get("max_tokens"), asked.get("max_completion_tokens"))
    if problem is not None:
        raise ChatBodyError(problem, param="max_completion_tokens")
    return asked


def _message(checks: FieldChecks, index: int, message: ChatMessageIn) -> ChatMessage:
    """The record's message, by ingest's `Message` rules (a problem noted, a placeholder given)."""
    fields = {"role": message.role, "content": message.text()}
    for name in ("tool_calls", "tool_call_id", "name"):
        if getattr(message, name) is not None:
            fields[name] = getattr(message, name)
    checked = checks.check(("messages", index), _MESSAGE, fields)
    return checked.as_record() if isinstance(checked, Message) else ChatMessage("user", "")


_MESSAGE = TypeAdapter(Message)
