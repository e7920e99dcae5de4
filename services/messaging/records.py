"""The records on inferq's topics, typed: `InferenceRequest`, `InferenceResult` and, for a streamed
answer, `InferenceChunk` (on the chunk topic beside the reply topic, before the result, marked by a header).

This module is the one place that spells out their fields (they mirror `schemas/*.avsc`). Every
service builds and reads them through these classes; `to_record` / `from_record` are the only
conversions to and from the Avro dicts the codec writes (see `inferq.messaging.codec`).

Decoding proves a record has the right types, not that its values are sane: the bounds of each
field are in ``limits.py``, and the dispatcher's ``record_rules.py`` applies them to what it reads.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Protocol

from inferq.messaging.errors import DecodeError
from inferq.messaging.tiers import Tier

Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    # Empty for an assistant message that only calls tools (OpenAI's `content: null`).
    content: str
    # An assistant message's tool calls: OpenAI's list as a JSON text (bounded by `tool_rules`).
    tool_calls: str | None = None
    # A `tool` message answers this call.
    tool_call_id: str | None = None
    name: str | None = None

    def as_openai(self) -> dict[str, Any]:
        """The chat-completions message object (content null for a message that only calls tools);
        `DecodeError` for `tool_calls` that are not JSON."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls is not None:
            try:
                message["tool_calls"] = json.loads(self.tool_calls)
            except (ValueError, RecursionError) as exc:
                raise DecodeError("a message's tool_calls is not JSON", raw_size=0) from exc
            if not self.content:
                message["content"] = None
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            message["name"] = self.name
        return message

    def to_record(self) -> Record:
        return {
            "role": self.role,
            "content": self.content,
            "tool_calls": self.tool_calls,
            "tool_call_id": self.tool_call_id,
            "name": self.name,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ChatMessage:
        return cls(
            record["role"],
            record["content"],
            record.get("tool_calls"),
            record.get("tool_call_id"),
            record.get("name"),
        )


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One inference call waiting in a priority topic (`schemas/inference_request.avsc`)."""

    request_id: str
    scenario: str
    tier: Tier
    created_at_ms: int
    # Past this instant nobody waits for the answer: answered EXPIRED, never sent to the LLM.
    expire_at_ms: int
    messages: tuple[ChatMessage, ...]
    tenant: str = "default"
    origin_region: str = "local"
    # 1 for the first try; raised on each retry.
    attempt: int = 1
    estimated_tokens: int | None = None
    # The result topic; None means the default results topic.
    reply_to: str | None = None
    # The Kafka key: one session's requests stay in order.
    session_id: str | None = None
    # An explicit model; None means the tier's model.
    model: str | None = None
    # Extra chat-completions parameters, each value JSON-encoded (as on the wire).
    params: Mapping[str, str] | None = None
    # A retry waits until this instant (epoch ms); None for a first attempt.
    not_before_ms: int | None = None
    # The caller streams: chunks go to the chunk topic beside the reply topic before the result.
    stream: bool = False
    # Where the outcome is POSTed as a signed webhook; None for none.
    callback_url: str | None = None
    # An embedding request's texts (``POST /v1/embeddings``; its `messages` then empty); None for chat.
    embedding_input: tuple[str, ...] | None = None
    # The vectors' dimensions an embedding request asks for; None for the model's own.
    embedding_dimensions: int | None = None

    @property
    def is_embedding(self) -> bool:
        """Whether the backend is asked for vectors of `embedding_input` rather than a chat answer."""
        return self.embedding_input is not None

    @property
    def key(self) -> bytes:
        """The Kafka key: the session, else the request itself."""
        return (self.session_id or self.request_id).encode()

    def openai_messages(self) -> list[dict[str, Any]]:
        return [m.as_openai() for m in self.messages]

    def decoded_params(self) -> dict[str, Any]:
        """The chat-completions parameters, JSON-decoded; `DecodeError` for a value that is not JSON."""
        if not self.params:
            return {}
        try:
            return {name: json.loads(value) for name, value in self.params.items()}
        except (ValueError, RecursionError) as exc:
            raise DecodeError(f"params is not a map of JSON values: {exc}", raw_size=0) from exc

    def retry(self, *, not_before_ms: int) -> InferenceRequest:
        """The next attempt of this request, held back until `not_before_ms`."""
        return replace(self, attempt=self.attempt + 1, not_before_ms=not_before_ms)

    def to_record(self) -> Record:
        return {
            "request_id": self.request_id,
            "tenant": self.tenant,
            "origin_region": self.origin_region,
            "scenario": self.scenario,
            "tier": self.tier.value,
            "created_at_ms": self.created_at_ms,
            "expire_at_ms": self.expire_at_ms,
            "attempt": self.attempt,
            "estimated_tokens": self.estimated_tokens,
            "reply_to": self.reply_to,
            "session_id": self.session_id,
            "model": self.model,
            "messages": [m.to_record() for m in self.messages],
            "params": dict(self.params) if self.params is not None else None,
            "not_before_ms": self.not_before_ms,
            "stream": self.stream,
            "callback_url": self.callback_url,
            "embedding_input": None if self.embedding_input is None else list(self.embedding_input),
            "embedding_dimensions": self.embedding_dimensions,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> InferenceRequest:
        """From a decoded Avro record (the codec has checked every field's type)."""
        params = record.get("params")
        embedding_input = record.get("embedding_input")
        return cls(
            request_id=record["request_id"],
            scenario=record["scenario"],
            tier=Tier(record["tier"]),
            created_at_ms=record["created_at_ms"],
            expire_at_ms=record["expire_at_ms"],
            messages=tuple(ChatMessage.from_record(m) for m in record["messages"]),
            tenant=record.get("tenant", "default"),
            origin_region=record.get("origin_region", "local"),
            attempt=record.get("attempt", 1),
            estimated_tokens=record.get("estimated_tokens"),
            reply_to=record.get("reply_to"),
            session_id=record.get("session_id"),
            model=record.get("model"),
            params=MappingProxyType(dict(params)) if params is not None else None,
            not_before_ms=record.get("not_before_ms"),
            stream=record.get("stream", False),
            callback_url=record.get("callback_url"),
            embedding_input=None if embedding_input is None else tuple(embedding_input),
            embedding_dimensions=record.get("embedding_dimensions"),
        )


class Status(enum.StrEnum):
    """A request's terminal outcome."""

    OK = "OK"
    EXPIRED = "EXPIRED"
    EVICTED = "EVICTED"
    REJECTED = "REJECTED"
    FAILED = "FAILED"


TokenDetails = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    # The backend's finer counters (`cached_tokens`, `reasoning_tokens`...), as OpenAI names them;
    # None when it sent none. Bounded by the dispatcher (`limits.MAX_TOKEN_DETAILS`).
    prompt_tokens_details: TokenDetails | None = None
    completion_tokens_details: TokenDetails | None = None

    def as_openai(self) -> dict[str, Any]:
        """The chat-completions `usage` object; a details object only when the backend sent one."""
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.prompt_tokens_details is not None:
            usage["prompt_tokens_details"] = dict(self.prompt_tokens_details)
        if self.completion_tokens_details is not None:
            usage["completion_tokens_details"] = dict(self.completion_tokens_details)
        return usage

    def to_record(self) -> Record:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "prompt_tokens_details": _plain(self.prompt_tokens_details),
            "completion_tokens_details": _plain(self.completion_tokens_details),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Usage:
        return cls(
            record["prompt_tokens"],
            record["completion_tokens"],
            record["total_tokens"],
            _frozen(record.get("prompt_tokens_details")),
            _frozen(record.get("completion_tokens_details")),
        )


def _plain(details: TokenDetails | None) -> dict[str, int] | None:
    return None if details is None else dict(details)


def _frozen(details: Mapping[str, int] | None) -> TokenDetails | None:
    return None if details is None else MappingProxyType(dict(details))


@dataclass(frozen=True, slots=True)
class Choice:
    """One choice of an answer (`n` asks for several): its text (None when it has none), why it
    stopped, its tool calls and `logprobs` as JSON texts, and the model's `refusal`. Bounded by the
    dispatcher (`answer_facts`) before it is written."""

    index: int
    content: str | None = None
    finish_reason: str | None = None
    tool_calls: str | None = None
    refusal: str | None = None
    logprobs: str | None = None

    def openai_tool_calls(self) -> list[Any] | None:
        """The tool calls as OpenAI's list; None for none (or, never written so, not a JSON list)."""
        calls = _json_or_none(self.tool_calls)
        return calls if isinstance(calls, list) else None

    def openai_logprobs(self) -> dict[str, Any] | None:
        """OpenAI's `logprobs` object; None for none (or, never written so, not a JSON object)."""
        logprobs = _json_or_none(self.logprobs)
        return logprobs if isinstance(logprobs, dict) else None

    @property
    def plain(self) -> bool:
        """Whether a result's top-level fields say all of it (it is the first, with no refusal or
        logprobs): then a result does not repeat it in `choices`."""
        return self.index == 0 and self.refusal is None and self.logprobs is None

    def to_record(self) -> Record:
        return {
            "index": self.index,
            "content": self.content,
            "finish_reason": self.finish_reason,
            "tool_calls": self.tool_calls,
            "refusal": self.refusal,
            "logprobs": self.logprobs,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Choice:
        return cls(
            record["index"],
            record.get("content"),
            record.get("finish_reason"),
            record.get("tool_calls"),
            record.get("refusal"),
            record.get("logprobs"),
        )


def _json_or_none(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def recorded_choices(choices: Sequence[Choice]) -> tuple[Choice, ...] | None:
    """What a result's `choices` field holds of an answer's `choices`: None when its top-level fields
    (the first choice's) say it all, every choice otherwise."""
    if len(choices) <= 1 and all(c.plain for c in choices):
        return None
    return tuple(choices)


@dataclass(frozen=True, slots=True)
class InferenceResult:
    """The terminal outcome of one request (`schemas/inference_result.avsc`)."""

    request_id: str
    tier: Tier
    status: Status
    model: str
    # When the request was accepted (its created_at_ms).
    enqueued_at_ms: int
    completed_at_ms: int
    attempts: int
    dispatcher_id: str
    output: str | None = None
    error: str | None = None
    usage: Usage | None = None
    # When it took a concurrency token; None if it never did.
    dispatched_at_ms: int | None = None
    # The request's tenant: (tenant, request_id) names a result.
    tenant: str = "default"
    # The request's webhook, copied from it: where the results service POSTs this outcome.
    callback_url: str | None = None
    # Why the backend stopped (one of `limits.FINISH_REASONS`); None when it did not say.
    finish_reason: str | None = None
    # The backend's `system_fingerprint`; None when it sent none.
    system_fingerprint: str | None = None
    # The assistant's tool calls, OpenAI's list as a JSON text (checked by the dispatcher); None for none.
    tool_calls: str | None = None
    # Every choice of the answer when the fields above (the first choice's) do not say it all (n > 1,
    # a refusal, logprobs); None: one choice, theirs (`recorded_choices`).
    choices: tuple[Choice, ...] | None = None
    # An embedding request's vectors, one per input in order (checked by the dispatcher); None for chat.
    embeddings: tuple[tuple[float, ...], ...] | None = None

    def openai_tool_calls(self) -> list[Any] | None:
        """The tool calls as OpenAI's list; None for none (or, never written so, not a JSON list)."""
        calls = _json_or_none(self.tool_calls)
        return calls if isinstance(calls, list) else None

    def all_choices(self) -> tuple[Choice, ...]:
        """Every choice of the answer: `choices`, or the one the top-level fields say (a result
        written before v6 included)."""
        if self.choices:
            return self.choices
        return (Choice(0, self.output, self.finish_reason, self.tool_calls),)

    @property
    def queue_wait_ms(self) -> int | None:
        return None if self.dispatched_at_ms is None else self.dispatched_at_ms - self.enqueued_at_ms

    @property
    def end_to_end_ms(self) -> int:
        return self.completed_at_ms - self.enqueued_at_ms

    def to_record(self) -> Record:
        usage = self.usage
        return {
            "request_id": self.request_id,
            "tier": self.tier.value,
            "status": self.status.value,
            "output": self.output,
            "error": self.error,
            "model": self.model,
            "usage": None if usage is None else usage.to_record(),
            "enqueued_at_ms": self.enqueued_at_ms,
            "dispatched_at_ms": self.dispatched_at_ms,
            "completed_at_ms": self.completed_at_ms,
            "attempts": self.attempts,
            "dispatcher_id": self.dispatcher_id,
            "tenant": self.tenant,
            "callback_url": self.callback_url,
            "finish_reason": self.finish_reason,
            "system_fingerprint": self.system_fingerprint,
            "tool_calls": self.tool_calls,
            "choices": None if self.choices is None else [c.to_record() for c in self.choices],
            "embeddings": None if self.embeddings is None else [list(v) for v in self.embeddings],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> InferenceResult:
        usage = record.get("usage")
        choices = record.get("choices")
        embeddings = record.get("embeddings")
        return cls(
            request_id=record["request_id"],
            tier=Tier(record["tier"]),
            status=Status(record["status"]),
            model=record["model"],
            enqueued_at_ms=record["enqueued_at_ms"],
            completed_at_ms=record["completed_at_ms"],
            attempts=record["attempts"],
            dispatcher_id=record["dispatcher_id"],
            output=record.get("output"),
            error=record.get("error"),
            usage=None if usage is None else Usage.from_record(usage),
            dispatched_at_ms=record.get("dispatched_at_ms"),
            tenant=record.get("tenant", "default"),
            callback_url=record.get("callback_url"),
            finish_reason=record.get("finish_reason"),
            system_fingerprint=record.get("system_fingerprint"),
            tool_calls=record.get("tool_calls"),
            choices=None if choices is None else tuple(Choice.from_record(c) for c in choices),
            embeddings=None if embeddings is None else tuple(tuple(v) for v in embeddings),
        )


# A record on a reply topic with this header set to `CHUNK_KIND` is an `InferenceChunk`; any other is
# an `InferenceResult` (results written before streaming existed carry no header).
KIND_HEADER = "inferq-kind"
CHUNK_KIND = b"chunk"


HeaderValue = bytes | str | None


class ReplyRecord(Protocol):
    """A record consumed from a reply topic, as far as its readers use it (aiokafka's
    `ConsumerRecord` is one): the results consumer and the delivery follower."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def offset(self) -> int: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


def is_chunk(headers: Iterable[tuple[str, HeaderValue]] | Mapping[str, HeaderValue] | None) -> bool:
    """Whether a reply-topic record with these Kafka headers (pairs, as aiokafka and confluent-kafka
    give them, or a mapping) is a chunk rather than a result."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    return any(name == KIND_HEADER and value in (CHUNK_KIND, CHUNK_KIND.decode()) for name, value in pairs)


@dataclass(frozen=True, slots=True)
class InferenceChunk:
    """A piece of a streamed answer (`schemas/inference_chunk.avsc`), keyed like the request's result."""

    request_id: str
    tenant: str
    # The attempt that produced it: a retry's stream starts again at seq 0.
    attempt: int
    # 0, 1, 2... within one attempt.
    seq: int
    # The tokens since the previous chunk.
    delta: str
    model: str
    created_at_ms: int
    dispatcher_id: str
    # Chunk schema v2: which choice the delta belongs to, and what else it carries (None for nothing).
    choice_index: int = 0
    # OpenAI's `delta.tool_calls` list as a JSON text (bounded by the dispatcher).
    tool_calls: str | None = None
    refusal: str | None = None
    # Set on the chunk that ends the choice.
    finish_reason: str | None = None
    # OpenAI's choice `logprobs` object for the delta's tokens, as a JSON text (bounded by the dispatcher).
    logprobs: str | None = None

    def openai_tool_calls(self) -> list[Any] | None:
        """The tool-call deltas as OpenAI's list; None for none (or, never written so, not a JSON list)."""
        return _json_list(self.tool_calls)

    def openai_logprobs(self) -> dict[str, Any] | None:
        """The logprobs as OpenAI's object; None for none (or, never written so, not a JSON object)."""
        if self.logprobs is None:
            return None
        try:
            value = json.loads(self.logprobs)
        except (ValueError, RecursionError):
            return None
        return value if isinstance(value, dict) else None

    def to_record(self) -> Record:
        return {
            "request_id": self.request_id,
            "tenant": self.tenant,
            "attempt": self.attempt,
            "seq": self.seq,
            "delta": self.delta,
            "model": self.model,
            "created_at_ms": self.created_at_ms,
            "dispatcher_id": self.dispatcher_id,
            "choice_index": self.choice_index,
            "tool_calls": self.tool_calls,
            "refusal": self.refusal,
            "finish_reason": self.finish_reason,
            "logprobs": self.logprobs,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> InferenceChunk:
        return cls(
            request_id=record["request_id"],
            tenant=record.get("tenant", "default"),
            attempt=record["attempt"],
            seq=record["seq"],
            delta=record["delta"],
            model=record["model"],
            created_at_ms=record["created_at_ms"],
            dispatcher_id=record["dispatcher_id"],
            choice_index=record.get("choice_index", 0),
            tool_calls=record.get("tool_calls"),
            refusal=record.get("refusal"),
            finish_reason=record.get("finish_reason"),
            logprobs=record.get("logprobs"),
        )


def _json_list(text: str | None) -> list[Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, list) else None
