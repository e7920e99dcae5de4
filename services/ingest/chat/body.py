"""From an OpenAI chat-completions body and inferq's headers to ingest's `SubmitRequest`.

The OpenAI body is checked for its own shape here (`model`, `messages` with string or text-part
content, `n` 1 only, `stream`, `stream_options`, `metadata`, `user`); every value ingest already
bounds (the messages' roles and sizes, `temperature`, `top_p`, `max_tokens`, `stop`, `seed`, the
penalties, `response_format`, the deadline, the tier) is handed to `SubmitRequest` unchanged and
checked there, so the two APIs accept exactly the same values. A problem is a 400 naming the
parameter the way OpenAI does (``messages[0].role``, ``temperature``) or the header it came from.

Where inferq's own choices come from (a header wins; the same choice in both is refused when they differ):

| choice | header | `metadata` key | default |
| --- | --- | --- | --- |
| scenario | ``X-Inferq-Scenario`` | ``inferq_scenario`` | `default_scenario` (realtime_chat) |
| tier | ``X-Inferq-Priority`` (HIGH, MEDIUM, LOW) | ``inferq_priority`` | the scenario's |
| deadline | ``X-Inferq-Deadline-Ms`` (ms from now) | ``inferq_deadline_ms`` | the tier's |

The SDK's own timeout (``X-Stainless-Read-Timeout`` in seconds from the Python SDK,
``X-Stainless-Timeout`` from the Node one) only ever shortens the deadline: past it the caller has
stopped waiting. A malformed one is ignored (it is the SDK's header, not the caller's choice).
`user` (or `safety_identifier`) becomes the session key, as a hash: one end user's requests stay in
order.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import Headers

from inferq.ingest.body import load_object
from inferq.ingest.chat.errors import ChatBodyError, ModelNotFoundError
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.validation import SubmitRequest, describe
from inferq.messaging import limits

HEADER_SCENARIO = "x-inferq-scenario"
HEADER_PRIORITY = "x-inferq-priority"
HEADER_DEADLINE = "x-inferq-deadline-ms"
SDK_TIMEOUT_HEADERS = ("x-stainless-read-timeout", "x-stainless-timeout")
META_SCENARIO = "inferq_scenario"
META_PRIORITY = "inferq_priority"
META_DEADLINE = "inferq_deadline_ms"
# The model name that lets inferq choose: the tier's model (the dispatcher's setting).
AUTO_MODEL = "inferq"

# OpenAI's own bounds of `metadata`.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_USER_CHARS = 512
# Parameters of the OpenAI API that inferq does not serve: named as such, not as unknown.
UNSUPPORTED = frozenset(
    {
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "functions",
        "function_call",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "audio",
        "modalities",
        "prediction",
        "reasoning_effort",
        "web_search_options",
        "verbosity",
        "service_tier",
    }
)
# Handed to ingest's `params` as they are: ingest checks them (`ChatParams`). The body declares a
# field for each.
_PASSED_PARAMS = tuple(sorted(limits.ALLOWED_PARAMS))
_INDEX = re.compile(r"\.(\d+)(?=\.|$)")
_SECONDS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str = Field(strict=True, max_length=limits.MAX_MESSAGE_CHARS)


class ChatMessageIn(BaseModel):
    """A message as OpenAI takes it; its role and text are checked by ingest's `Message`."""

    model_config = ConfigDict(extra="forbid")
    role: Any
    content: Annotated[str, Field(strict=True)] | list[TextPart]
    name: str | None = Field(default=None, strict=True, max_length=64)

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool | None = Field(default=None, strict=True)
    include_obfuscation: bool | None = Field(default=None, strict=True)


MetadataKey = Annotated[str, Field(max_length=MAX_METADATA_KEY_CHARS)]
MetadataValue = Annotated[str, Field(strict=True, max_length=MAX_METADATA_VALUE_CHARS)]


class ChatCompletionBody(BaseModel):
    """The OpenAI body's own fields; the values ingest bounds are `Any` here and checked there."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(strict=True, min_length=1, max_length=limits.MAX_MODEL_CHARS)
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=limits.MAX_MESSAGES)
    n: int | None = Field(default=None, strict=True, ge=1, le=1)
    stream: bool | None = Field(default=None, strict=True)
    stream_options: StreamOptions | None = None
    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=MAX_METADATA_PAIRS)
    user: str | None = Field(default=None, strict=True, max_length=MAX_USER_CHARS)
    safety_identifier: str | None = Field(default=None, strict=True, max_length=MAX_USER_CHARS)
    store: bool | None = Field(default=None, strict=True)
    max_completion_tokens: Any = None
    temperature: Any = None
    top_p: Any = None
    max_tokens: Any = None
    stop: Any = None
    seed: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    response_format: Any = None


def parse_chat_body(raw: bytes, guard: JsonGuard) -> ChatCompletionBody:
    """The OpenAI body of `raw`: `MalformedBodyError` (400) for what is not JSON within the bounds,
    `ChatBodyError` (400) for a parameter OpenAI does not have or inferq does not serve, or a value
    out of the body's own shape."""
    data = load_object(raw, guard)
    _refuse_unknown(data)
    try:
        return ChatCompletionBody.model_validate(data)
    except ValidationError as exc:
        raise _body_error(describe(exc), {}) from exc


def chat_submission(
    body: ChatCompletionBody,
    headers: Headers,
    *,
    models: frozenset[str],
    default_scenario: str,
    request_id: str,
) -> SubmitRequest:
    """`body` and inferq's headers checked by ingest's own rules (`SubmitRequest`: the same bounds as
    ``POST /v1/requests``), queued as `request_id` (its outcome goes to the ingest's default reply
    topic, the one it follows); `ChatBodyError` (400) naming the parameter or header at fault,
    `ModelNotFoundError` (404)."""
    sources: dict[str, str] = {}
    fields: dict[str, Any] = {
        "request_id": request_id,
        "messages": [{"role": m.role, "content": m.text()} for m in body.messages],
        "scenario": _choice(headers, body.metadata, HEADER_SCENARIO, META_SCENARIO, "scenario", sources)
        or default_scenario,
    }
    priority = _choice(headers, body.metadata, HEADER_PRIORITY, META_PRIORITY, "priority", sources)
    if priority is not None:
        fields["priority"] = priority.upper() if priority.isascii() else priority
    deadline = _choice(headers, body.metadata, HEADER_DEADLINE, META_DEADLINE, "deadline_ms", sources)
    if deadline is not None:
        if not (deadline.isascii() and deadline.isdigit() and len(deadline) <= 12):
            raise ChatBodyError(
                f"must be a whole number of milliseconds, 1 to {limits.MAX_DEADLINE_MS}",
                param=sources["deadline_ms"],
            )
        fields["deadline_ms"] = int(deadline)
    if body.model != AUTO_MODEL:
        if body.model not in models:
            raise ModelNotFoundError()
        fields["model"] = body.model
    end_user = body.safety_identifier or body.user
    if end_user:
        fields["session_id"] = (
            "u-" + hashlib.sha256(end_user.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        )
    params = {name: getattr(body, name) for name in _PASSED_PARAMS if getattr(body, name) is not None}
    if body.max_completion_tokens is not None:
        if "max_tokens" in params and params["max_tokens"] != body.max_completion_tokens:
            raise ChatBodyError(
                "give max_tokens or max_completion_tokens, not two different values",
                param="max_completion_tokens",
            )
        params["max_tokens"] = body.max_completion_tokens
        sources["params.max_tokens"] = "max_completion_tokens"
    if params:
        fields["params"] = params
    if body.stream:
        fields["stream"] = True
    try:
        submission = SubmitRequest.model_validate(fields)
    except ValidationError as exc:
        raise _body_error(describe(exc), sources) from exc
    if body.stream_options is not None and not body.stream:
        raise ChatBodyError("stream_options is only allowed when stream is true", param="stream_options")
    return submission


def sdk_patience_ms(headers: Headers) -> int | None:
    """The SDK's timeout in ms (the shortest of its headers), or None; a malformed value is ignored."""
    found: list[int] = []
    for name in SDK_TIMEOUT_HEADERS:
        for value in headers.getlist(name):
            if _SECONDS.fullmatch(value):
                ms = math.ceil(float(value) * 1000)
                if ms > 0:
                    found.append(min(ms, limits.MAX_DEADLINE_MS))
    return min(found) if found else None


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


def _refuse_unknown(data: dict[str, Any]) -> None:
    for key in data:
        if key in ChatCompletionBody.model_fields:
            continue
        name = str(key)[:64].encode("utf-8", "backslashreplace").decode("utf-8")
        if key in UNSUPPORTED:
            raise ChatBodyError(f"inferq does not support {name}", param=name, code="unsupported_parameter")
        raise ChatBodyError(
            f"Unrecognized request argument supplied: {name}", param=name, code="unknown_parameter"
        )


def _param(field: str, sources: dict[str, str]) -> str:
    """An ingest field path as OpenAI names the parameter (or the header it came from)."""
    if field in sources:
        return sources[field]
    head, _, _ = field.partition(".")
    if head in sources and head != "params":
        return sources[head]
    if field.startswith("params."):
        field = field.removeprefix("params.")
    return _INDEX.sub(r"[\1]", field)


def _body_error(problems: list[dict[str, str]], sources: dict[str, str]) -> ChatBodyError:
    named = [(_param(p["field"], sources), p["problem"]) for p in problems]
    message = "; ".join(f"{param}: {problem}" for param, problem in named)
    return ChatBodyError(f"Invalid request: {message}", param=named[0][0] if named else None)
