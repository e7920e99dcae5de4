"""The ingest API's request body, validated field by field so every refusal names the field.

Every bound comes from `inferq.messaging.limits`, the table the dispatcher applies to records
written straight to Kafka: integers fit their Avro types, identifiers are short and plain, free text
is valid Unicode (a lone surrogate cannot be encoded as UTF-8), and `params` is an allow-list.
Numbers are strict: ``true``, ``"5"`` or ``5.0`` is not an integer.

Rules that need the clock or the topic prefix (`expire_at_ms` against now, `reply_to` against the
reply topics) are checked when the record is built (`inferq.ingest.record`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from inferq.messaging import limits, param_rules, tool_rules
from inferq.messaging.records import ChatMessage
from inferq.messaging.tiers import Tier
from inferq.webhooks.urls import MAX_URL_CHARS

Role = Literal["system", "user", "assistant", "tool", "developer"]

TOP_LOGPROBS_ALONE = "top_logprobs is only allowed with logprobs true"
# A problem list is part of a 422 body: bounded, however many fields a hostile body breaks.
MAX_PROBLEMS = 20
# A field path echoes the client's keys: cut, so a 100 KB key is not sent back whole.
MAX_FIELD_CHARS = 64
_SURROGATE = re.compile("[\ud800-\udfff]")
_ID_RULE = "letters, digits, '.', '_', ':' or '-'"


def _unicode_text(value: str) -> str:
    # JSON may spell a lone surrogate (\ud800) that no UTF-8 encoder accepts: refuse it here, not
    # as a failed encode later.
    if not value.isascii() and _SURROGATE.search(value):
        raise ValueError("must be valid Unicode text (no lone surrogate)")
    return value


def _identifier_check(max_chars: int) -> Any:
    # fullmatch: the pattern's `$` alone would let a trailing newline through.
    def check(value: str) -> str:
        if len(value) > max_chars or not limits.ID_PATTERN.fullmatch(value):
            raise ValueError(f"must be 1-{max_chars} characters of {_ID_RULE}")
        return value

    return AfterValidator(check)


def _identifier_field(max_chars: int) -> Any:
    # The pattern is for the JSON schema; the check above says it in words.
    pattern = limits.ID_PATTERN.pattern.replace("128", str(max_chars))
    return Field(strict=True, min_length=1, json_schema_extra={"pattern": pattern, "maxLength": max_chars})


Identifier = Annotated[str, _identifier_field(limits.MAX_ID_CHARS), _identifier_check(limits.MAX_ID_CHARS)]
ScenarioName = Annotated[
    str, _identifier_field(limits.MAX_SCENARIO_CHARS), _identifier_check(limits.MAX_SCENARIO_CHARS)
]
TenantName = Annotated[
    str, _identifier_field(limits.MAX_TENANT_CHARS), _identifier_check(limits.MAX_TENANT_CHARS)
]
ModelName = Annotated[
    str, _identifier_field(limits.MAX_MODEL_CHARS), _identifier_check(limits.MAX_MODEL_CHARS)
]
MessageText = Annotated[
    str, Field(strict=True, max_length=limits.MAX_MESSAGE_CHARS), AfterValidator(_unicode_text)
]
StopText = Annotated[
    str, Field(strict=True, min_length=1, max_length=limits.MAX_STOP_CHARS), AfterValidator(_unicode_text)
]


def _rule_of(check: Callable[[Any], str | None], own: str) -> Any:
    """A `tool_rules` check of the field `own` as its validator: the rule's problem is the field's
    (its place below the field kept: ``tools[3].function.parameters: over 16384 bytes``)."""

    def validate(value: Any) -> Any:
        problem = None if value is None else check(value)
        if problem is not None:
            raise ValueError(problem.removeprefix(f"{own}: "))
        return value

    return AfterValidator(validate)


# The JSON schemas below say the shape for the OpenAPI document; `tool_rules` says the bounds.
_LIST_OF_OBJECTS = {"type": "array", "minItems": 1, "items": {"type": "object"}}
ToolCalls = Annotated[
    Any,
    _rule_of(tool_rules.tool_calls_problem, "tool_calls"),
    WithJsonSchema(_LIST_OF_OBJECTS | {"maxItems": limits.MAX_TOOL_CALLS}),
]
ToolCallId = Annotated[str, Field(strict=True), _rule_of(tool_rules.tool_call_id_problem, "tool_call_id")]


class Message(BaseModel):
    """A chat message. `content` may be null only on an assistant message with `tool_calls`; a
    `tool` message needs its `tool_call_id` (the call it answers), and no other has one."""

    model_config = ConfigDict(extra="forbid")
    role: Role
    # Before `content`, whose rule needs them.
    tool_calls: ToolCalls | None = None
    tool_call_id: ToolCallId | None = None
    name: str | None = Field(
        default=None, strict=True, min_length=1, max_length=limits.MAX_MESSAGE_NAME_CHARS
    )
    content: MessageText | None = Field(default=None, validate_default=True)

    @field_validator("content")
    @classmethod
    def _content_or_calls(cls, content: str | None, info: ValidationInfo) -> str | None:
        if content is None and info.data.get("tool_calls") is None:
            raise ValueError("Field required (null only on an assistant message with tool_calls)")
        return content

    @model_validator(mode="after")
    def _tool_fields(self) -> Message:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("tool_calls is only allowed on an assistant message")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs tool_call_id (the id of the call it answers)")
        if self.role != "tool" and self.tool_call_id is not None:
            raise ValueError("tool_call_id is only allowed on a tool message")
        return self

    def as_record(self) -> ChatMessage:
        """The record's message (`tool_calls` as their JSON text)."""
        calls = None if self.tool_calls is None else json.dumps(self.tool_calls, separators=(",", ":"))
        return ChatMessage(self.role, self.content or "", calls, self.tool_call_id, self.name)


_RESPONSE_FORMAT = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"type": "string", "enum": sorted(limits.RESPONSE_FORMATS)},
        "json_schema": {"type": "object"},
    },
}


def _param_rule(name: str) -> Any:
    """The validator of a parameter `param_rules` bounds."""
    return _rule_of(param_rules.RULES[name], name)


_STRING = WithJsonSchema({"type": "string"})
_OBJECT = WithJsonSchema({"type": "object"})


def _enum(values: frozenset[str]) -> Any:
    return WithJsonSchema({"type": "string", "enum": sorted(values)})


LogitBias = Annotated[
    Any,
    _param_rule("logit_bias"),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": limits.MAX_LOGIT_BIAS_TOKENS,
            "additionalProperties": {
                "type": "integer",
                "minimum": -limits.MAX_LOGIT_BIAS,
                "maximum": limits.MAX_LOGIT_BIAS,
            },
        }
    ),
]
Metadata = Annotated[
    Any,
    _param_rule("metadata"),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": limits.MAX_METADATA_PAIRS,
            "additionalProperties": {"type": "string", "maxLength": limits.MAX_METADATA_VALUE_CHARS},
        }
    ),
]
MaxCompletionTokens = Annotated[
    Any,
    _param_rule("max_completion_tokens"),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": limits.MAX_COMPLETION_TOKENS}),
]
Modalities = Annotated[
    Any,
    _param_rule("modalities"),
    WithJsonSchema(
        {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {"type": "string", "enum": sorted(limits.MODALITIES)},
        }
    ),
]


class ChatParams(BaseModel):
    """The chat-completions parameters a caller may set (`limits.ALLOWED_PARAMS`), each bounded.

    `model`, `messages`, `stream` and any other name are refused: the dispatcher chooses the
    model. `n` asks for that many choices (each a whole answer); `top_logprobs` only with `logprobs`.
    """

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(
        default=None, strict=True, ge=0, le=limits.MAX_TEMPERATURE, allow_inf_nan=False
    )
    top_p: float | None = Field(default=None, strict=True, ge=0, le=limits.MAX_TOP_P, allow_inf_nan=False)
    max_tokens: int | None = Field(default=None, strict=True, ge=1, le=limits.MAX_COMPLETION_TOKENS)
    stop: (
        StopText | Annotated[list[StopText], Field(min_length=1, max_length=limits.MAX_STOP_SEQUENCES)] | None
    ) = None
    seed: int | None = Field(default=None, strict=True, ge=-limits.AVRO_LONG_MAX - 1, le=limits.AVRO_LONG_MAX)
    presence_penalty: float | None = Field(
        default=None, strict=True, ge=-limits.MAX_PENALTY, le=limits.MAX_PENALTY, allow_inf_nan=False
    )
    frequency_penalty: float | None = Field(
        default=None, strict=True, ge=-limits.MAX_PENALTY, le=limits.MAX_PENALTY, allow_inf_nan=False
    )
    # Function calling and structured output: JSON values as OpenAI takes them, within the bounds
    # of `tool_rules` (the dispatcher applies the same to a record written straight to Kafka).
    response_format: (
        Annotated[
            Any,
            _rule_of(tool_rules.response_format_problem, "response_format"),
            WithJsonSchema(_RESPONSE_FORMAT),
        ]
        | None
    ) = None
    tools: (
        Annotated[
            Any,
            _rule_of(tool_rules.tools_problem, "tools"),
            WithJsonSchema(_LIST_OF_OBJECTS | {"maxItems": limits.MAX_TOOLS}),
        ]
        | None
    ) = None
    tool_choice: (
        Annotated[
            Any,
            _rule_of(tool_rules.tool_choice_problem, "tool_choice"),
            WithJsonSchema({"type": ["string", "object"]}),
        ]
        | None
    ) = None
    parallel_tool_calls: bool | None = Field(default=None, strict=True)
    n: int | None = Field(default=None, strict=True, ge=1, le=limits.MAX_CHOICES)
    logprobs: bool | None = Field(default=None, strict=True)
    top_logprobs: int | None = Field(default=None, strict=True, ge=0, le=limits.MAX_TOP_LOGPROBS)
    # The rest of the chat-completions API, forwarded as given within `param_rules`' bounds.
    logit_bias: LogitBias | None = None
    user: Annotated[Any, _param_rule("user"), _STRING] | None = None
    metadata: Metadata | None = None
    max_completion_tokens: MaxCompletionTokens | None = None
    reasoning_effort: (
        Annotated[Any, _param_rule("reasoning_effort"), _enum(limits.REASONING_EFFORTS)] | None
    ) = None
    modalities: Modalities | None = None
    store: Annotated[Any, _param_rule("store"), WithJsonSchema({"type": "boolean"})] | None = None
    safety_identifier: Annotated[Any, _param_rule("safety_identifier"), _STRING] | None = None
    prompt_cache_key: Annotated[Any, _param_rule("prompt_cache_key"), _STRING] | None = None
    prompt_cache_retention: (
        Annotated[Any, _param_rule("prompt_cache_retention"), _enum(limits.PROMPT_CACHE_RETENTIONS)] | None
    ) = None
    prompt_cache_options: Annotated[Any, _param_rule("prompt_cache_options"), _OBJECT] | None = None
    service_tier: Annotated[Any, _param_rule("service_tier"), _enum(limits.SERVICE_TIERS)] | None = None
    verbosity: Annotated[Any, _param_rule("verbosity"), _enum(limits.VERBOSITIES)] | None = None
    prediction: Annotated[Any, _param_rule("prediction"), _OBJECT] | None = None
    web_search_options: Annotated[Any, _param_rule("web_search_options"), _OBJECT] | None = None
    moderation: Annotated[Any, _param_rule("moderation"), _OBJECT] | None = None

    @model_validator(mode="after")
    def _tool_choice_needs_tools(self) -> ChatParams:
        if self.tool_choice is not None and self.tools is None:
            raise ValueError("tool_choice is only allowed with tools")
        if self.top_logprobs is not None and self.logprobs is not True:
            raise ValueError(TOP_LOGPROBS_ALONE)
        problem = param_rules.max_tokens_conflict(self.max_tokens, self.max_completion_tokens)
        if problem is not None:
            raise ValueError(problem)
        return self

    def as_json_values(self) -> dict[str, Any]:
        """The parameters set, as JSON values (what the record's `params` map encodes); one set to
        OpenAI's default (`n` 1, `logprobs` false) is not."""
        values = self.model_dump(exclude_none=True)
        return {name: value for name, value in values.items() if not limits.at_default(name, value)}


class SubmitRequest(BaseModel):
    """``POST /v1/requests`` body. `deadline_ms` is relative (ms from now); `expire_at_ms` absolute;
    at most one of them (a body with both is refused: neither silently wins)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"not": {"required": ["deadline_ms", "expire_at_ms"]}},
    )

    scenario: ScenarioName
    messages: list[Message] = Field(min_length=1, max_length=limits.MAX_MESSAGES)
    model: ModelName | None = None
    tenant: TenantName = "default"
    session_id: Identifier | None = None
    deadline_ms: int | None = Field(default=None, strict=True, gt=0, le=limits.MAX_DEADLINE_MS)
    expire_at_ms: int | None = Field(default=None, strict=True, gt=0, le=limits.AVRO_LONG_MAX)
    priority: Tier | None = None
    request_id: Identifier | None = None
    estimated_tokens: int | None = Field(default=None, strict=True, ge=0, le=limits.MAX_ESTIMATED_TOKENS)
    reply_to: str | None = Field(
        default=None, strict=True, min_length=1, max_length=249, pattern=limits.TOPIC_PATTERN.pattern
    )
    params: ChatParams | None = None
    # Where the outcome is POSTed, signed (services/webhooks: https, an allowed host, a public
    # address); the form here, the rules in inferq.ingest.callbacks.
    callback_url: str | None = Field(default=None, strict=True, min_length=1, max_length=MAX_URL_CHARS)
    # The answer's pieces go to the reply topic as they come (the results service's /events relays them).
    stream: bool = Field(default=False, strict=True)


def deadline_conflict(body: SubmitRequest) -> list[dict[str, str]]:
    """The problems of a body that gives both deadlines (empty when it gives at most one)."""
    if body.deadline_ms is None or body.expire_at_ms is None:
        return []
    problem = "give deadline_ms or expire_at_ms, not both"
    return [{"field": "deadline_ms", "problem": problem}, {"field": "expire_at_ms", "problem": problem}]


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ".".join(str(p) for p in loc) or "body"
    if len(path) > MAX_FIELD_CHARS:
        path = path[: MAX_FIELD_CHARS - 3] + "..."
    # A key the client spelt with a lone surrogate must not break the JSON answer that names it.
    return path.encode("utf-8", "backslashreplace").decode("utf-8")


def _problem(err: Any) -> str:
    if err["type"] == "extra_forbidden" and len(err["loc"]) == 2 and err["loc"][0] == "params":
        allowed = ", ".join(sorted(limits.ALLOWED_PARAMS))
        return f"not an allowed parameter (allowed: {allowed})"
    message = str(err["msg"])
    # pydantic prefixes our own validators' messages; the client needs only the rule.
    return message.removeprefix("Value error, ")


def describe(exc: ValidationError) -> list[dict[str, str]]:
    """One entry per problem (at most `MAX_PROBLEMS`): the dotted field path and what is wrong."""
    return describe_errors(exc.errors(include_url=False, include_input=False, include_context=False))


def describe_errors(errors: Sequence[ErrorDetails]) -> list[dict[str, str]]:
    """`describe` of pydantic's errors, however they were collected."""
    problems = []
    for err in errors[:MAX_PROBLEMS]:
        loc = err["loc"]
        # A union's member name (`str`, `list[...]`) in the path says nothing to a client.
        loc = tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {"str", "list"})))
        problem = {"field": _field_path(loc), "problem": _problem(err)}
        if problem not in problems:
            problems.append(problem)
    if len(errors) > MAX_PROBLEMS:
        problems.append({"field": "body", "problem": f"and {len(errors) - MAX_PROBLEMS} more problems"})
    return problems
