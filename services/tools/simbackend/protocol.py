"""Wire formats: the OpenAI chat-completions request, response and error bodies, and the admin requests.

Only what the simulator needs is modelled; unknown request fields (`top_p`, `user`, ...) are accepted
and ignored so that any OpenAI client can call it. `tools`, `tool_choice` and `response_format` shape
the answer (`structured.py`); `n` and `logprobs` the sync body (`choices.py`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

# Characters per token: the usual rule of thumb for English text, as inferq estimates it; the
# simulator has no tokenizer and needs none.
from inferq.dispatcher.rate_budget import CHARS_PER_TOKEN
from inferq.tools.simbackend import structured

REPLY_PREFIX = "sim reply to: "
REPLY_QUOTE_CHARS = 40
# What OpenAI's `system_fingerprint` looks like; one simulated configuration, so one value.
SYSTEM_FINGERPRINT = "fp_inferqsim01"

# Strict: OpenAI rejects "max_tokens": "5"; a lenient simulator would hide a client bug until production.
_STRICT_OPEN = ConfigDict(strict=True, extra="allow")


class ContentPart(BaseModel):
    model_config = _STRICT_OPEN
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = _STRICT_OPEN
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(part.text for part in self.content if part.text)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = _STRICT_OPEN
    # A last chunk with no choices and the call's usage, as OpenAI sends it.
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = _STRICT_OPEN
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    # True: the answer comes as `chat.completion.chunk` server-sent events (see `streaming.py`).
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Function calling and JSON output (`structured.py`), as OpenAI takes them; only their shape here.
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    # Several choices, and each token's logprob (`choices.py`), with OpenAI's bounds.
    n: int = Field(default=1, ge=1, le=128)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)

    @field_validator("model")
    @classmethod
    def _model_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a non-empty string")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs_with_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("logprobs") is not True:
            raise ValueError("only allowed with logprobs true")
        return value


class FaultUpdate(BaseModel):
    """Body of `POST /admin/faults`; fields left out keep their current value."""

    # Forbid unknown fields: a typo such as "error-rate" must fail loudly, not leave the fault off.
    model_config = ConfigDict(strict=True, extra="forbid")
    outage: bool | None = None
    error_rate: float | None = Field(default=None, ge=0, le=1)
    degradation: float | None = Field(default=None, gt=0)
    stream_drop_rate: float | None = Field(default=None, ge=0, le=1)


@dataclass(frozen=True)
class ApiError:
    """An OpenAI-style error: `{"error": {"message", "type", "param", "code"}}` with its HTTP status."""

    status: int
    message: str
    type: str
    param: str | None = None
    code: str | None = None

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


UNAUTHORIZED = ApiError(
    401,
    "Incorrect or missing API key; send it as 'Authorization: Bearer <key>'.",
    "invalid_request_error",
    code="invalid_api_key",
)
SERVER_ERROR = ApiError(500, "The server had an error while processing your request.", "server_error")
UNAVAILABLE = ApiError(503, "The server is overloaded or not ready yet.", "server_error")
OUTAGE = ApiError(503, "The simulated backend is in an outage.", "server_error", code="outage")


def rate_limited(limit: int, retry_after_s: int) -> ApiError:
    return ApiError(
        429,
        f"Rate limit reached: {limit} requests already in progress. Please try again in {retry_after_s}s.",
        "requests",
        code="rate_limit_exceeded",
    )


def minute_limit_reached(kind: str, limit: int | None, retry_after_s: int) -> ApiError:
    """OpenAI's 429 for a per-minute limit (`kind`: "requests" or "tokens")."""
    return ApiError(
        429,
        f"Rate limit reached on {kind} per min: limit {limit}. Please try again in {retry_after_s}s.",
        kind,
        code="rate_limit_exceeded",
    )


_Model = TypeVar("_Model", bound=BaseModel)
_FIELD_NAMES = frozenset(
    name
    for model in (ContentPart, ChatMessage, StreamOptions, ChatCompletionRequest, FaultUpdate)
    for name in model.model_fields
)


def parse(model: type[_Model], body: bytes) -> _Model | ApiError:
    """Validate a JSON body, or explain the first problem the way OpenAI does (400, naming the field)."""
    try:
        parsed = model.model_validate_json(body)
    except ValidationError as exc:
        return _invalid_request(exc)
    return parsed


def _invalid_request(exc: ValidationError) -> ApiError:
    first = exc.errors()[0]
    if first["type"] == "json_invalid":
        return ApiError(400, "We could not parse the JSON body of your request.", "invalid_request_error")
    if not first["loc"]:
        return ApiError(400, "The request body must be a JSON object.", "invalid_request_error")
    param = _param(first["loc"])
    if first["type"] == "missing":
        message, code = f"Missing required parameter: '{param}'.", "missing_required_parameter"
    else:
        reason = first["msg"].removeprefix("Value error, ")
        message, code = f"Invalid value for '{param}': {reason}.", "invalid_value"
    return ApiError(400, message, "invalid_request_error", param=param, code=code)


def _param(loc: tuple[int | str, ...]) -> str:
    """`("messages", 0, "content", "str")` -> `"messages[0].content"`.

    Pydantic appends union member tags such as `"str"` to the location; they are not field names and stop
    the path.
    """
    param = str(loc[0])
    for part in loc[1:]:
        if isinstance(part, int):
            param += f"[{part}]"
        elif part in _FIELD_NAMES:
            param += f".{part}"
        else:
            break
    return param


def count_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class Answer:
    """What the simulated model answers to a request: its text, why it stopped, and the usage."""

    content: str
    finish_reason: Literal["stop", "length", "tool_calls"]
    prompt_tokens: int
    completion_tokens: int
    # The prompt's tokens before its last message: what a provider's prompt cache would hold of a
    # conversation sent again with one more turn.
    cached_tokens: int = 0
    # The model's call of a tool (then `content` is empty and sent as null).
    tool_calls: list[dict[str, Any]] | None = None

    def message(self) -> dict[str, Any]:
        """The choice's `message`."""
        if self.tool_calls:
            return {"role": "assistant", "content": None, "tool_calls": self.tool_calls}
        return {"role": "assistant", "content": self.content}

    def usage(self) -> dict[str, object]:
        """OpenAI's `usage`, its details objects included (no audio, reasoning or prediction here)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }

    def tokens(self) -> list[str]:
        """The content cut into tokens of `CHARS_PER_TOKEN` characters (as `count_tokens` counts)."""
        text = self.content
        return [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def answer(request: ChatCompletionRequest, *, choice: int = 0) -> Answer:
    """The answer to the last user message: a short deterministic text, cut at `max_tokens`; another
    `choice` than the first (`n`) says which it is, so the choices differ."""
    messages = request.messages
    last_user = next((m for m in reversed(messages) if m.role == "user"), messages[-1])
    prompt_tokens = sum(count_tokens(m.text()) for m in messages)
    cached_tokens = sum(count_tokens(m.text()) for m in messages[:-1])
    if messages[-1].role == "user" and request.tools:
        conversation = "\n".join(m.text() for m in messages)
        call = structured.tool_call(request.tools, request.tool_choice, conversation)
        if call is not None:
            tokens = count_tokens(json.dumps(call))
            return Answer("", "tool_calls", prompt_tokens, tokens, cached_tokens, tool_calls=[call])
    quote = last_user.text()[:REPLY_QUOTE_CHARS]
    prefix = REPLY_PREFIX if choice == 0 else f"sim reply {choice + 1} to: "
    content = structured.json_text(request.response_format, quote) or prefix + quote
    finish_reason: Literal["stop", "length", "tool_calls"] = "stop"
    max_tokens = request.max_completion_tokens or request.max_tokens
    if max_tokens is not None and count_tokens(content) > max_tokens:
        # What a real model does when it runs out of budget mid-answer.
        content = content[: max_tokens * CHARS_PER_TOKEN]
        finish_reason = "length"
    return Answer(content, finish_reason, prompt_tokens, count_tokens(content), cached_tokens)
