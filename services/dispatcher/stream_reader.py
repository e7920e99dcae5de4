"""A streamed answer read event by event: each event's per-choice deltas handed on as they come,
the whole answer assembled at the end (`StreamReader`; `backend.py` makes its `Completion`), and
the server-sent events' `data` (`sse_data`).

Each event's `choices[i]` gives its `delta` (`content`, `refusal`, `tool_calls` in OpenAI's delta
shape), `logprobs` and, when the choice ends, `finish_reason`; the usage chunk
(`stream_options.include_usage`) gives the usage, and ``data: [DONE]`` ends it.

The backend is not trusted, and the rules are `answer_facts`' (which checks every value):

- an event that is not a JSON object, carries an `error`, or has the wrong shape (a choice that is
  not an object...) fails the call, retriable (`BackendError`);
- a tool-call delta out of shape or past the bounds (`delta_facts.tool_call_deltas`) fails it
  too: dropping a piece of a call would hand the caller a different call than the backend made;
  and so do tool calls that, assembled at the end, are not a call (`answer_facts.tool_calls`, as for
  a call not streamed);
- what only informs (a `finish_reason` the API does not have, `logprobs` out of shape or too large,
  a refusal that is not text, a choice whose `index` was not asked for) is dropped with a log line
  naming the field, and the answer goes on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inferq.dispatcher import answer_facts, delta_facts
from inferq.dispatcher.deltas import StreamDelta, ToolCallDelta
from inferq.dispatcher.errors import BackendError
from inferq.messaging import limits

# The `BackendError` message of an answer not taken: a short reason, never the backend's words.
_UNREADABLE = "backend sent an unreadable event"


async def sse_data(lines: AsyncIterable[bytes]) -> AsyncIterator[str]:
    """The `data` of each server-sent event (several `data:` lines of one event joined by a newline);
    comments and other fields (`event:`, `id:`, `retry:`) are skipped, as the SSE standard says."""
    data: list[str] = []
    async for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


@dataclass
class _Call:
    """One tool call of a choice, assembled from its pieces."""

    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    arguments_chars: int = 0

    def as_openai(self) -> dict[str, Any]:
        arguments = "".join(self.arguments)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


@dataclass
class _Choice:
    """What one choice has said so far."""

    pieces: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    # All its calls' arguments: bounded like a message's `tool_calls`, so a chunk record stays small.
    arguments_chars: int = 0
    # As sent (the last said wins); checked once, at the end, by `answer_facts`.
    finish_reason: object = None
    refusal: list[str] = field(default_factory=list)
    # Its `logprobs.content` entries, checked piece by piece; None once past `MAX_LOGPROBS_CHARS`
    # (a whole answer's bound: the result then goes without them, as a sync answer's would).
    logprobs: list[Mapping[str, Any]] | None = field(default_factory=list)
    logprobs_chars: int = 0

    def keep_logprobs(self, entries: tuple[Mapping[str, Any], ...]) -> None:
        if not entries or self.logprobs is None:
            return
        self.logprobs_chars += len(json.dumps(entries, separators=(",", ":")))
        if self.logprobs_chars > limits.MAX_LOGPROBS_CHARS:
            self.logprobs = None
        else:
            self.logprobs.extend(entries)


class StreamReader:
    """The state of one streamed answer: each choice's pieces and calls, the model and the usage."""

    def __init__(self, model: str, on_delta: Callable[[StreamDelta], None], *, choices: int = 1) -> None:
        """`choices`: how many the request asked for (`n`); another choice index is dropped."""
        self._model = model
        self._on_delta = on_delta
        self._choices: dict[int, _Choice] = {}
        self._asked = max(1, choices)
        # As sent (the last said wins); checked once, at the end, by `answer_facts`.
        self.usage: dict[str, Any] = {}
        self.system_fingerprint: object = None
        self.answered_model: object = None

    def read(self, data: str) -> bool:
        """Take one event's data; True at ``[DONE]``. `BackendError` for an unreadable event or an
        error the backend reports mid-stream (its token only, never its message)."""
        if data == "[DONE]":
            return True
        try:
            event = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise BackendError(f"{_UNREADABLE} (not JSON)", retriable=True) from exc
        if not isinstance(event, dict):
            raise BackendError(f"{_UNREADABLE} (not an object)", retriable=True)
        if event.get("error") is not None:
            raise BackendError(
                f"backend sent an error mid-stream{answer_facts.error_kind(data)}", retriable=True
            )
        try:
            for choice in event.get("choices") or ():
                self._read_choice(choice)
            if event.get("model") is not None:
                self.answered_model = event["model"]
            self.usage = event.get("usage") or self.usage
            if event.get("system_fingerprint") is not None:
                self.system_fingerprint = event["system_fingerprint"]
        except delta_facts.UnusableError as exc:
            raise BackendError(f"backend sent a bad tool-call delta ({exc})", retriable=True) from exc
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise BackendError(f"{_UNREADABLE} ({type(exc).__name__})", retriable=True) from exc
        return False

    def _read_choice(self, choice: dict[str, Any]) -> None:
        index = delta_facts.choice_index(choice.get("index", 0), asked=self._asked)
        if index is None:
            return
        state = self._choices.setdefault(index, _Choice())
        delta = choice.get("delta") or {}
        piece = delta.get("content")
        content = str(piece) if piece else ""
        calls = delta_facts.tool_call_deltas(delta.get("tool_calls"))
        for call in calls:
            self._assemble(state, call)
        finish_reason = choice.get("finish_reason")
        if finish_reason is not None:
            state.finish_reason = finish_reason
        if content:
            state.pieces.append(content)
        refusal = answer_facts.refusal(delta.get("refusal")) or ""
        if refusal:
            state.refusal.append(refusal)
        logprobs = delta_facts.logprobs_content(choice.get("logprobs"))
        state.keep_logprobs(logprobs)
        said = StreamDelta(
            choice=index,
            content=content,
            refusal=refusal,
            tool_calls=calls,
            logprobs=logprobs,
            finish_reason=None if finish_reason is None else answer_facts.finish_reason(finish_reason),
        )
        if said:
            self._on_delta(said)

    @staticmethod
    def _assemble(state: _Choice, piece: ToolCallDelta) -> None:
        call = state.calls.get(piece.index)
        if call is None:
            # At most `MAX_TOOL_CALLS` of them: `tool_call_deltas` bounds the index.
            call = state.calls[piece.index] = _Call()
        if piece.id is not None:
            if call.id not in (None, piece.id):
                raise delta_facts.UnusableError("a second id for one call")
            call.id = piece.id
        if piece.name is not None:
            if call.name not in (None, piece.name):
                raise delta_facts.UnusableError("a second name for one call")
            call.name = piece.name
        call.arguments_chars += len(piece.arguments)
        state.arguments_chars += len(piece.arguments)
        if call.arguments_chars > limits.MAX_TOOL_ARGUMENTS_CHARS:
            raise delta_facts.UnusableError(f"arguments over {limits.MAX_TOOL_ARGUMENTS_CHARS}")
        if state.arguments_chars > limits.MAX_TOOL_CALLS_CHARS:
            raise delta_facts.UnusableError(f"all arguments over {limits.MAX_TOOL_CALLS_CHARS}")
        call.arguments.append(piece.arguments)

    def tool_calls(self, choice: int = 0) -> list[dict[str, Any]]:
        """The choice's tool calls assembled from their pieces (in index order), unchecked."""
        calls = self._choices[choice].calls if choice in self._choices else {}
        return [calls[i].as_openai() for i in sorted(calls)]

    def answer(self) -> list[dict[str, Any]]:
        """The whole answer as a call not streamed gives its `choices` (each choice's text,
        refusal, tool calls, logprobs and finish_reason, in index order), unchecked:
        `answer_facts.choices` checks them as it checks a sync answer's. A stream that said nothing
        is one empty choice."""
        said = []
        for index in sorted(self._choices) or [0]:
            state = self._choices.get(index, _Choice())
            message = {
                "content": "".join(state.pieces) or None,
                "refusal": "".join(state.refusal) or None,
                "tool_calls": self.tool_calls(index) or None,
            }
            logprobs = {"content": state.logprobs, "refusal": None} if state.logprobs else None
            said.append(
                {
                    "index": index,
                    "message": message,
                    "finish_reason": state.finish_reason,
                    "logprobs": logprobs,
                }
            )
        return said

    def output(self, choice: int = 0) -> str:
        return "".join(self._choices[choice].pieces) if choice in self._choices else ""

    def finish_reason(self, choice: int = 0) -> object:
        """The choice's last `finish_reason` as sent (`answer_facts.finish_reason` checks it)."""
        return self._choices[choice].finish_reason if choice in self._choices else None
