"""From an OpenAI chat-completions body and inferq's headers to the request record.

Every value ingest bounds (the messages' roles and text, the scenario, the tier, the deadline, the
model, `temperature`, `top_p`, `max_tokens`, `stop`, `seed`, the penalties, `response_format`,
`tools`, `tool_choice`, `parallel_tool_calls`, a message's `tool_calls`, `tool_call_id` and `name`,
`n`, `logprobs`, `top_logprobs`) is
checked by the rule of the field that carries it in ``POST /v1/requests`` (`SubmitRequest`,
`Message`, `ChatParams`), value by value, so the two APIs accept exactly the same values and say
the same about the others. A problem is a 400 naming the parameter the way OpenAI does
(``messages[0].role``, ``temperature``) or the header it came from.

Where inferq's own choices come from (a header wins; the same choice in both is refused when they differ):

| choice | header | `metadata` key | default |
| --- | --- | --- | --- |
| scenario | ``X-Inferq-Scenario`` | ``inferq_scenario`` | `default_scenario` (realtime_chat) |
| tier | ``X-Inferq-Priority`` (HIGH, MEDIUM, LOW) | ``inferq_priority`` | the scenario's |
| deadline | ``X-Inferq-Deadline-Ms`` (ms from now) | ``inferq_deadline_ms`` | the tier's |

`user` (or `safety_identifier`) becomes the session key, as a hash: one end user's requests stay in
order; both are forwarded too. `metadata` is forwarded without its ``inferq_*`` keys (inferq's
choices above). `max_completion_tokens` is forwarded under its own name. The fields the tenant may
pass through (`ChatCompletionBody.passthrough`) follow the known ones in the record's `params`.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Annotated, Any, TypeVar, cast

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails
from starlette.datastructures import Headers

from inferq.ingest.chat.body import AUTO_MODEL, ChatCompletionBody, ChatMessageIn, body_error
from inferq.ingest.chat.errors import ChatBodyError, ModelNotFoundError
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

HEADER_SCENARIO = "x-inferq-scenario"
HEADER_PRIORITY = "x-inferq-priority"
HEADER_DEADLINE = "x-inferq-deadline-ms"
META_SCENARIO = "inferq_scenario"
META_PRIORITY = "inferq_priority"
META_DEADLINE = "inferq_deadline_ms"

T = TypeVar("T")


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
    sources: dict[str, str] = {}
    scenario = _choice(headers, body.metadata, HEADER_SCENARIO, META_SCENARIO, "scenario", sources)
    priority = _choice(headers, body.metadata, HEADER_PRIORITY, META_PRIORITY, "priority", sources)
    if priority is not None and priority.isascii():
        priority = priority.upper()
    deadline = _choice(headers, body.metadata, HEADER_DEADLINE, META_DEADLINE, "deadline_ms", sources)
    if deadline is not None and not (deadline.isascii() and deadline.isdigit() and len(deadline) <= 12):
        raise ChatBodyError(
            f"must be a whole number of milliseconds, 1 to {limits.MAX_DEADLINE_MS}",
            param=sources["deadline_ms"],
        )
    model = None if body.model == AUTO_MODEL else body.model
    if model is not None and model not in models:
        raise ModelNotFoundError()
    end_user = body.safety_identifier or body.user
    session_id = None
    if end_user:
        session_id = "u-" + hashlib.sha256(end_user.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    params = _asked_params(body)
    # In the order `SubmitRequest` checks its fields, so the problems are listed as there.
    bounds = _Bounds()
    scenario = bounds.check(("scenario",), _rule(SubmitRequest, "scenario"), scenario or default_scenario)
    messages = tuple(_message(bounds, i, m) for i, m in enumerate(body.messages))
    model = bounds.check(("model",), _rule(SubmitRequest, "model"), model)
    deadline_ms = bounds.check(
        ("deadline_ms",), _rule(SubmitRequest, "deadline_ms"), None if deadline is None else int(deadline)
    )
    tier = bounds.check(("priority",), _rule(SubmitRequest, "priority"), priority)
    checked = {name: bounds.check(("params", name), _rule(ChatParams, name), v) for name, v in params.items()}
    if bounds.problems:
        raise body_error(describe_errors(bounds.problems), sources)
    # As JSON values, the way `ChatParams.as_json_values` gives a native body's.
    values = {name: _rule(ChatParams, name).dump_python(value) for name, value in checked.items()}
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


def _message(bounds: _Bounds, index: int, message: ChatMessageIn) -> ChatMessage:
    """The record's message, by ingest's `Message` rules (a problem noted, a placeholder given)."""
    fields = {"role": message.role, "content": message.text()}
    for name in ("tool_calls", "tool_call_id", "name"):
        if getattr(message, name) is not None:
            fields[name] = getattr(message, name)
    checked = bounds.check(("messages", index), _MESSAGE, fields)
    return checked.as_record() if isinstance(checked, Message) else ChatMessage("user", "")


_MESSAGE = TypeAdapter(Message)


class _Bounds:
    """Values checked one by one by ingest's field rules; the problems of all of them collected."""

    def __init__(self) -> None:
        self.problems: list[ErrorDetails] = []

    def check(self, loc: tuple[str | int, ...], rule: TypeAdapter[T], value: Any) -> T:
        """`value` as `rule` takes it; a problem (its place `loc`) noted, and `value` given back as
        it is: it is used only when no problem was noted."""
        try:
            return rule.validate_python(value)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            self.problems.extend(cast(ErrorDetails, {**e, "loc": (*loc, *e["loc"])}) for e in errors)
            return cast(T, value)


@functools.cache
def _rule(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    """The type and bounds of `model`'s field `name`, as a validator of one value."""
    field = model.model_fields[name]
    # Built at run time from the field, so typed as Any: the adapter's own type says nothing more.
    rule: Any = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
    return TypeAdapter(rule)


def _choice(
    headers: Headers,
    metadata: dict[str, str] | None,
    header: str,
    key: str,
    field: str,
    sources: dict[str, str],
) -> str | None:
    values = headers.getlist(header)
    if len(values) > 1:
        raise ChatBodyError(f"header {header} given {len(values)} times", param=header)
    from_meta = (metadata or {}).get(key)
    if values and from_meta is not None and values[0] != from_meta:
        raise ChatBodyError(f"header {header} and metadata.{key} disagree; give one", param=header)
    if values:
        sources[field] = header
        return values[0]
    if from_meta is not None:
        sources[field] = f"metadata.{key}"
    return from_meta
