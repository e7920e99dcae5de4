"""What a caller gives and gets: `Submission` in; `Handle` (accepted), `Chunk` (a piece of a streamed
answer) and `Outcome` (the terminal result) out. The same types over HTTP and Kafka."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferq.client.errors import EvictedError, ExpiredError, FailedError, OutcomeError, RejectedError
from inferq.messaging.records import Status
from inferq.messaging.tiers import Tier

MessagesLike = str | Sequence[Mapping[str, Any]]
# What a chat message may carry (ingest's `Message`): its role and text, an assistant's tool calls,
# the call a tool message answers, a participant's name.
MESSAGE_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "name")


def as_messages(messages: MessagesLike) -> list[dict[str, Any]]:
    """A plain string is one user message; otherwise the chat messages, copied (each field of
    `MESSAGE_FIELDS` it sets, so a tool-call round trip's history goes through)."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    return [{k: m[k] for k in MESSAGE_FIELDS if k in m} for m in messages]


@dataclass(frozen=True)
class Submission:
    """One request, as `POST /v1/requests` takes it (the same field names and rules): `params` takes
    every chat-completions parameter of `ChatParams` (tools, tool_choice, parallel_tool_calls,
    response_format, logit_bias, metadata, max_completion_tokens...), as JSON values."""

    scenario: str
    messages: Sequence[Mapping[str, Any]]
    request_id: str | None = None
    session_id: str | None = None
    priority: Tier | None = None
    deadline_ms: int | None = None
    model: str | None = None
    params: Mapping[str, Any] | None = None
    estimated_tokens: int | None = None
    # Chunks of the answer go to the chunk topic as the backend writes them.
    stream: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        """The JSON body of `POST /v1/requests` (fields left unset are left out)."""
        body: dict[str, Any] = {"scenario": self.scenario, "messages": [dict(m) for m in self.messages]}
        optional = {
            "request_id": self.request_id,
            "session_id": self.session_id,
            "priority": self.priority.value if self.priority is not None else None,
            "deadline_ms": self.deadline_ms,
            "model": self.model,
            "params": dict(self.params) if self.params is not None else None,
            "estimated_tokens": self.estimated_tokens,
            "stream": True if self.stream else None,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        body.update(self.extra)
        return body


@dataclass(frozen=True)
class Handle:
    """An accepted request: written durably to its tier's topic."""

    request_id: str
    tier: Tier
    expire_at_ms: int
    # True when inferq already had this request_id from this tenant (an idempotent resend over HTTP).
    duplicate: bool = False


@dataclass(frozen=True)
class Chunk:
    """A piece of a streamed answer, in order. `restart` marks the first piece of an answer that
    started over (a retry, or another dispatcher after a crash): drop the text received so far.
    `gap` marks a piece after one that was lost (chunks are transient): the text received has a
    hole, which only the outcome's output fills."""

    request_id: str
    delta: str
    seq: int
    attempt: int = 1
    restart: bool = False
    gap: bool = False


@dataclass(frozen=True)
class Outcome:
    """A request's terminal result, as `GET /v1/requests/{id}` shows it."""

    request_id: str
    status: Status
    tier: Tier
    model: str
    attempts: int
    output: str | None = None
    error: str | None = None
    # OpenAI's usage: the three counts, and the backend's `*_tokens_details` when it sent them.
    usage: Mapping[str, Any] | None = None
    timings: Mapping[str, int | None] = field(default_factory=dict)
    # Why the backend stopped ("length": max_tokens cut the answer), when it said.
    finish_reason: str | None = None
    system_fingerprint: str | None = None
    # Every choice (`n` > 1, a refusal, logprobs), as the view lists them; None: the fields above.
    choices: Sequence[Mapping[str, Any]] | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> Outcome:
        """From the results service's JSON (`inferq.results.view.public_view`)."""
        return cls(
            request_id=str(view["request_id"]),
            status=Status(view["status"]),
            tier=Tier(view["tier"]),
            model=str(view.get("model", "")),
            attempts=int(view.get("attempts", 1)),
            output=view.get("output"),
            error=view.get("error"),
            usage=view.get("usage"),
            timings=dict(view.get("timings") or {}),
            finish_reason=view.get("finish_reason"),
            system_fingerprint=view.get("system_fingerprint"),
            choices=view.get("choices"),
        )

    def to_json(self) -> dict[str, Any]:
        view: dict[str, Any] = {
            "request_id": self.request_id,
            "status": self.status.value,
            "tier": self.tier.value,
            "model": self.model,
            "attempts": self.attempts,
            "timings": dict(self.timings),
        }
        for name in ("output", "error", "usage", "finish_reason", "system_fingerprint"):
            value = getattr(self, name)
            if value is not None:
                view[name] = dict(value) if isinstance(value, Mapping) else value
        if self.choices is not None:
            view["choices"] = [dict(choice) for choice in self.choices]
        return view

    def raise_for_status(self) -> Outcome:
        """This outcome when OK; else the `OutcomeError` of its status."""
        error = outcome_error(self)
        if error is not None:
            raise error
        return self


def outcome_error(outcome: Outcome) -> OutcomeError | None:
    if outcome.status is Status.OK:
        return None
    if outcome.status is Status.EXPIRED:
        return ExpiredError(outcome)
    if outcome.status is Status.EVICTED:
        return EvictedError(outcome)
    if outcome.status is Status.REJECTED:
        return RejectedError(outcome)
    return FailedError(outcome)
