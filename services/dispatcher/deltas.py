"""A streamed answer's pieces, per choice: what the backend's stream reader hands on
(`StreamDelta`, already checked by `answer_facts`) and how pieces gathered for one chunk record
become its deltas (`merged`).

A piece belongs to one choice (its `index`) and carries any of: text, refusal text, tool-call
deltas (OpenAI's shape: a call's `index`, and its `id` and function `name` on its first piece, its
`arguments` in pieces), log probabilities, and the choice's `finish_reason` when it ends.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from inferq.messaging import limits


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """One piece of a tool call: `id` and `name` on the call's first piece, `arguments` in pieces."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def as_openai(self) -> dict[str, Any]:
        """OpenAI's `delta.tool_calls[]` entry (id, type and name only on the piece that has them)."""
        function: dict[str, Any] = {"arguments": self.arguments}
        if self.name is not None:
            function = {"name": self.name, **function}
        call: dict[str, Any] = {"index": self.index}
        if self.id is not None:
            call["id"] = self.id
        if self.id is not None or self.name is not None:
            call["type"] = "function"
        call["function"] = function
        return call

    def followed_by(self, later: ToolCallDelta) -> ToolCallDelta:
        """This piece and a later one of the same call as one."""
        return replace(
            self,
            id=self.id if self.id is not None else later.id,
            name=self.name if self.name is not None else later.name,
            arguments=self.arguments + later.arguments,
        )


@dataclass(frozen=True, slots=True)
class StreamDelta:
    """What one choice said since its previous piece."""

    choice: int = 0
    content: str = ""
    refusal: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    # The entries of OpenAI's `logprobs.content` for this piece's tokens.
    logprobs: tuple[Mapping[str, Any], ...] = ()
    finish_reason: str | None = None

    def size_chars(self) -> int:
        """About how many characters it adds to a chunk record (its texts, calls and logprobs)."""
        calls = sum(len(c.arguments) + len(c.id or "") + len(c.name or "") + 64 for c in self.tool_calls)
        logprobs = len(json.dumps(list(self.logprobs), separators=(",", ":"))) if self.logprobs else 0
        return len(self.content) + len(self.refusal) + calls + logprobs

    def __bool__(self) -> bool:
        return bool(
            self.content or self.refusal or self.tool_calls or self.logprobs or self.finish_reason is not None
        )

    def tool_calls_json(self) -> str | None:
        """The tool-call deltas as OpenAI's list in a JSON text; None for none."""
        if not self.tool_calls:
            return None
        return json.dumps([call.as_openai() for call in self.tool_calls], separators=(",", ":"))

    def logprobs_json(self) -> str | None:
        """OpenAI's choice `logprobs` object for these tokens as a JSON text; None for none."""
        if not self.logprobs:
            return None
        return json.dumps({"content": list(self.logprobs), "refusal": None}, separators=(",", ":"))

    def followed_by(self, later: StreamDelta) -> StreamDelta:
        """This piece and a later one of the same choice as one: texts joined, each call's pieces
        joined (calls in the order they first came)."""
        calls = {call.index: call for call in self.tool_calls}
        for call in later.tool_calls:
            calls[call.index] = calls[call.index].followed_by(call) if call.index in calls else call
        return replace(
            self,
            content=self.content + later.content,
            refusal=self.refusal + later.refusal,
            tool_calls=tuple(calls.values()),
            logprobs=self.logprobs + later.logprobs,
            finish_reason=later.finish_reason,
        )


def merged(pieces: Iterable[StreamDelta], *, max_chars: int = limits.MAX_CHUNK_CHARS) -> list[StreamDelta]:
    """The pieces gathered for the chunk topic as chunk deltas, in order: consecutive pieces of one
    choice become one, up to and including the piece that ends it (its `finish_reason`), and while
    it stays within `max_chars` (a piece larger than that is a chunk of its own)."""
    out: list[StreamDelta] = []
    size = 0
    for piece in pieces:
        piece_size = piece.size_chars()
        last = out[-1] if out else None
        if (
            last
            and last.choice == piece.choice
            and last.finish_reason is None
            and size + piece_size <= max_chars
        ):
            out[-1] = last.followed_by(piece)
            size += piece_size
        else:
            out.append(piece)
            size = piece_size
    return out
