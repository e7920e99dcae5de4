"""The OpenAI chat-completions body (`ChatCompletionBody`): the one shape a completion has before
its record (`inferq.ingest.chat.record`).

The body is checked for its own shape here (`model`, `messages` with string or text-part content,
`stream`, `stream_options`, `metadata`, `user`); every value ingest already bounds (the
messages' roles, sizes and function-calling fields, `temperature`, `top_p`, `max_tokens`, `stop`,
`seed`, the penalties, `response_format`, `tools`, `tool_choice`, `parallel_tool_calls`, `n`,
`logprobs`, `top_logprobs`) is kept
as the caller sent it and checked when the record is made, by the rules of ``POST /v1/requests``.
A problem is a 400 naming the parameter the way OpenAI does (``messages[0].role``, ``temperature``)
or the header it came from.

The SDK's own timeout (``X-Stainless-Read-Timeout`` in seconds from the Python SDK,
``X-Stainless-Timeout`` from the Node one) only ever shortens the deadline: past it the caller has
stopped waiting. A malformed one is ignored (it is the SDK's header, not the caller's choice).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import Headers

from inferq.ingest.body import load_object
from inferq.ingest.chat.errors import ChatBodyError
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.validation import describe
from inferq.messaging import limits

SDK_TIMEOUT_HEADERS = ("x-stainless-read-timeout", "x-stainless-timeout")
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
        "functions",
        "function_call",
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


MetadataKey = Annotated[str, Field(max_length=MAX_METADATA_KEY_CHARS)]
MetadataValue = Annotated[str, Field(strict=True, max_length=MAX_METADATA_VALUE_CHARS)]


class ChatCompletionBody(BaseModel):
    """The OpenAI body. The values ingest bounds are `Any` here, checked when the record is made
    (`inferq.ingest.chat.record`): the body's own shape is refused first, then inferq's choices
    (the model, the headers), then ingest's bounds, and each refusal names all of its problems."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(strict=True, min_length=1, max_length=limits.MAX_MODEL_CHARS)
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=limits.MAX_MESSAGES)
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
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    n: Any = None
    logprobs: Any = None
    top_logprobs: Any = None


def parse_chat_body(raw: bytes, guard: JsonGuard) -> ChatCompletionBody:
    """The OpenAI body of `raw`: `MalformedBodyError` (400) for what is not JSON within the bounds,
    `ChatBodyError` (400) for a parameter OpenAI does not have or inferq does not serve, or a value
    out of the body's own shape."""
    data = load_object(raw, guard)
    _refuse_unknown(data)
    try:
        return ChatCompletionBody.model_validate(data)
    except ValidationError as exc:
        raise body_error(describe(exc), {}) from exc


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


def body_error(problems: list[dict[str, str]], sources: dict[str, str]) -> ChatBodyError:
    """The 400 of ingest's `problems`, each named as OpenAI names the parameter, or as `sources`
    says (an ingest field path to the header or the parameter it came from)."""
    named = [(_param(p["field"], sources), p["problem"]) for p in problems]
    message = "; ".join(f"{param}: {problem}" for param, problem in named)
    return ChatBodyError(f"Invalid request: {message}", param=named[0][0] if named else None)
