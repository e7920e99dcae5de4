"""The OpenAI chat-completions body (`ChatCompletionBody`): the one shape a completion has before
its record (`inferq.ingest.chat.record`).

The body is checked for its own shape here (`model`, `messages` with string or text-part content,
`stream`, `stream_options`, `metadata`, `user`, `safety_identifier`); every value
ingest already bounds (the messages' roles, sizes and function-calling fields, and every parameter
of `ChatParams`) is kept as the caller sent it and checked when the record is made, by the rules of
``POST /v1/requests``. A field the body does not know is refused by name when inferq does not serve
it (`REFUSED`), passed through when the tenant is entitled to it by name (`parse_chat_body`'s
`passthrough`), and otherwise refused as unknown, as OpenAI does.
A problem is a 400 naming the parameter the way OpenAI does (``messages[0].role``, ``temperature``)
or the header it came from.

The SDK's own timeout (``X-Stainless-Read-Timeout`` in seconds from the Python SDK,
``X-Stainless-Timeout`` from the Node one) only ever shortens the deadline: past it the caller has
stopped waiting. A malformed one is ignored (it is the SDK's header, not the caller's choice).
"""

from __future__ import annotations

import math
import re
from collections.abc import Container
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError
from starlette.datastructures import Headers

from inferq.ingest.body import load_object
from inferq.ingest.chat.errors import ChatBodyError
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.validation import describe
from inferq.messaging import limits, param_rules

SDK_TIMEOUT_HEADERS = ("x-stainless-read-timeout", "x-stainless-timeout")
# The model name that lets inferq choose: the tier's model (the dispatcher's setting).
AUTO_MODEL = "inferq"

# Parameters of the OpenAI API that inferq does not serve: named as such, not as unknown.
# `functions` and `function_call` are deprecated for `tools` and `tool_choice` (docs/api.md says why
# they are refused rather than forwarded); an audio answer has no place in a result record.
REFUSED = {
    "functions": "functions is deprecated and not served by inferq: give tools instead",
    "function_call": (
        "function_call is deprecated and not served by inferq: give tool_choice (with tools) instead"
    ),
    "audio": "inferq answers text only: audio output is not supported",
}
_INDEX = re.compile(r"\.(\d+)(?=\.|$)")
_SECONDS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str = Field(strict=True, max_length=limits.MAX_MESSAGE_CHARS)


class ChatMessageIn(BaseModel):
    """A message as OpenAI takes it; its role and text are checked by the rules of ingest's `Message`."""

    model_config = ConfigDict(extra="forbid")
    role: Any
    content: Annotated[str, Field(strict=True)] | list[TextPart] | None = None
    name: Any = None
    # Checked with the rest of the message by ingest's `Message` rules (`tool_rules`' bounds).
    tool_calls: Any = None
    tool_call_id: Any = None

    def text(self) -> str | None:
        if self.content is None or isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool | None = Field(default=None, strict=True)
    include_obfuscation: bool | None = Field(default=None, strict=True)


MetadataKey = Annotated[str, Field(max_length=limits.MAX_METADATA_KEY_CHARS)]
MetadataValue = Annotated[str, Field(strict=True, max_length=limits.MAX_METADATA_VALUE_CHARS)]


class ChatCompletionBody(BaseModel):
    """The OpenAI body. The values ingest bounds are `Any` here, checked when the record is made
    (`inferq.ingest.chat.record`): the body's own shape is refused first, then inferq's choices
    (the model, the headers), then ingest's bounds, and each refusal names all of its problems."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(strict=True, min_length=1, max_length=limits.MAX_MODEL_CHARS)
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=limits.MAX_MESSAGES)
    stream: bool | None = Field(default=None, strict=True)
    stream_options: StreamOptions | None = None
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None, max_length=limits.MAX_METADATA_PAIRS
    )
    user: str | None = Field(default=None, strict=True, max_length=limits.MAX_END_USER_CHARS)
    safety_identifier: str | None = Field(default=None, strict=True, max_length=limits.MAX_END_USER_CHARS)
    temperature: Any = None
    top_p: Any = None
    max_tokens: Any = None
    stop: Any = None
    seed: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    response_format: Any = None
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    n: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    # Checked by `ChatParams`' rules (`inferq.messaging.param_rules`) when the record is made.
    logit_bias: Any = None
    max_completion_tokens: Any = None
    reasoning_effort: Any = None
    modalities: Any = None
    store: Any = None
    prompt_cache_key: Any = None
    prompt_cache_retention: Any = None
    prompt_cache_options: Any = None
    service_tier: Any = None
    verbosity: Any = None
    prediction: Any = None
    web_search_options: Any = None
    moderation: Any = None
    # Fields added to the API later that the tenant is entitled to, by name: as the caller sent them.
    _passthrough: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def passthrough(self) -> dict[str, Any]:
        """The fields passed through as they came (`parse_chat_body`'s `passthrough`)."""
        return self._passthrough


def parse_chat_body(
    raw: bytes, guard: JsonGuard, passthrough: Container[str] = frozenset()
) -> ChatCompletionBody:
    """The OpenAI body of `raw`: `MalformedBodyError` (400) for what is not JSON within the bounds,
    `ChatBodyError` (400) for a parameter OpenAI does not have or inferq does not serve, or a value
    out of the body's own shape. A field the body does not know whose name is in `passthrough` (the
    tenant's entitlements) and a plain identifier is kept aside, within its bounds
    (`param_rules.passthrough_problem`), as `ChatCompletionBody.passthrough`."""
    data = load_object(raw, guard)
    extra = _extra_fields(data, passthrough)
    try:
        body = ChatCompletionBody.model_validate({k: v for k, v in data.items() if k not in extra})
    except ValidationError as exc:
        raise body_error(describe(exc), {}) from exc
    body._passthrough = extra
    return body


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


def _extra_fields(data: dict[str, Any], passthrough: Container[str]) -> dict[str, Any]:
    """The fields of `data` passed through; `ChatBodyError` for any other field the body does not know."""
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key in ChatCompletionBody.model_fields:
            continue
        name = str(key)[:64].encode("utf-8", "backslashreplace").decode("utf-8")
        if key in REFUSED:
            raise ChatBodyError(REFUSED[key], param=name, code="unsupported_parameter")
        if key not in passthrough or not param_rules.passthrough_name_ok(key):
            raise ChatBodyError(
                f"Unrecognized request argument supplied: {name}", param=name, code="unknown_parameter"
            )
        problem = param_rules.passthrough_problem(key, value)
        if problem is not None:
            raise ChatBodyError(f"Invalid request: {problem}", param=name)
        extra[key] = value
    if len(extra) > limits.MAX_PASSTHROUGH_PARAMS:
        raise ChatBodyError(
            f"at most {limits.MAX_PASSTHROUGH_PARAMS} pass-through fields, not {len(extra)}",
            param=next(iter(extra)),
        )
    return extra


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


def body_error(problems: list[dict[str, str]], sources: dict[str, str]) -> ChatBodyError:
    """The 400 of ingest's `problems`, each named as OpenAI names the parameter, or as `sources`
    says (an ingest field path to the header or the parameter it came from)."""
    named = [(_param(p["field"], sources), p["problem"]) for p in problems]
    message = "; ".join(f"{param}: {problem}" for param, problem in named)
    return ChatBodyError(f"Invalid request: {message}", param=named[0][0] if named else None)
