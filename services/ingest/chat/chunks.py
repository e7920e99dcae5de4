"""A streamed chat completion's chunks, as OpenAI sends them, from the chunk records and the result.

Each chunk record becomes one ``chat.completion.chunk`` of its choice (`index`): its text, refusal,
tool-call deltas (OpenAI's `delta.tool_calls`: a call's `index`, its `id`, `type` and function `name`
on its first piece, `arguments` in pieces) and logprobs; a choice's first chunk after the first
choice's carries the role. Finish reasons wait for the end: the result may still carry text or
tool calls the records did not (a dispatcher that did not stream, chunks a slow reader lost), and
they must come before the choice ends.

The end (`StreamedAnswer.ending`): what each choice did not send yet (the rest of its text, and of
the first choice's tool calls: the whole calls when no chunk carried them; a choice no chunk
carried comes whole), then each choice's finish: the first choice's the result's `finish_reason`,
the others' as their chunks said (else as the result says). A result that does not continue what
was sent (the answer started over and came out otherwise) is the caller's error event
(`continued_by`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferq.ingest.chat import answers
from inferq.messaging import limits
from inferq.messaging.records import InferenceChunk, InferenceResult


class StreamedAnswer:
    """What one caller's stream has been sent: each choice's chunks, and its end."""

    def __init__(self, request_id: str, created_s: int) -> None:
        self._request_id = request_id
        self._created_s = created_s
        # Each choice's text and the first choice's tool calls sent (the result must continue them).
        self._texts: dict[int, list[str]] = {}
        self._calls: dict[int, _SentCall] = {}
        # Every choice seen (the first one's role went out first), and each one's finish as said.
        self._finish: dict[int, str | None] = {0: None}

    @property
    def text(self) -> str:
        """The first choice's text sent so far."""
        return self._sent_text(0)

    def _sent_text(self, index: int) -> str:
        return "".join(self._texts.get(index, ()))

    def continued_by(self, result: InferenceResult) -> bool:
        """Whether `result` continues what was sent (each choice's text, the first choice's calls'
        ids, names and arguments so far): False when the answer started over and came out
        otherwise."""
        contents = {choice.index: choice.content or "" for choice in result.all_choices()}
        contents[0] = result.output or ""
        # A choice the result does not list (a result that names only its first) is not checked.
        texts = all(contents[i].startswith(self._sent_text(i)) for i in self._texts if i in contents)
        return texts and self._rest_of_calls(result) is not None

    def _sent(self, piece: Any) -> None:
        if not isinstance(piece, dict) or not isinstance(piece.get("index"), int):
            return
        function = piece.get("function")
        function = function if isinstance(function, dict) else {}
        call = self._calls.setdefault(piece["index"], _SentCall())
        call.id = call.id or piece.get("id")
        call.name = call.name or function.get("name")
        call.arguments += str(function.get("arguments") or "")

    def _rest_of_calls(self, result: InferenceResult) -> list[dict[str, Any]] | None:
        """The delta pieces that complete the calls sent into the result's (the whole calls when
        none was sent); None when the result's calls do not continue them."""
        calls = [c for c in result.openai_tool_calls() or () if isinstance(c, dict)]
        indices = sorted(self._calls)
        if len(indices) > len(calls):
            return None
        following = indices[-1] + 1 if indices else 0
        out: list[dict[str, Any]] = []
        for position, call in enumerate(calls):
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            whole = _SentCall(call.get("id"), function.get("name"), str(function.get("arguments") or ""))
            if position < len(indices):
                index, sent = indices[position], self._calls[indices[position]]
            else:
                index, sent, following = following, _SentCall(), following + 1
            if sent.id not in (None, whole.id) or sent.name not in (None, whole.name):
                return None
            if not whole.arguments.startswith(sent.arguments):
                return None
            piece = whole.rest_after(sent, index)
            if piece is not None:
                out.append(piece)
        return out

    def chunk(self, record: InferenceChunk) -> dict[str, Any] | None:
        """The chunk of `record`; None when it carries nothing to send now (only its choice's end)."""
        index = record.choice_index
        first = index not in self._finish
        if first or record.finish_reason is not None:
            self._finish[index] = record.finish_reason or self._finish.get(index)
        calls = record.openai_tool_calls()
        logprobs = record.openai_logprobs()
        if not (first or record.delta or record.refusal or calls or logprobs):
            return None
        self._texts.setdefault(index, []).append(record.delta)
        if index == 0:
            for piece in calls or ():
                self._sent(piece)
        return answers.chunk(
            self._request_id,
            self._created_s,
            record.model,
            index=index,
            role=first,
            content=record.delta or None,
            refusal=record.refusal,
            tool_calls=calls,
            logprobs=logprobs,
        )

    def ending(self, result: InferenceResult) -> list[dict[str, Any]]:
        """The chunks that end an OK result's stream (the usage chunk aside): what each choice did
        not send yet, then every choice's finish. The caller has checked that the result continues
        what was sent (`continued_by`)."""
        rid, created_s, model = self._request_id, self._created_s, result.model
        out: list[dict[str, Any]] = []
        rest = (result.output or "")[len(self.text) :]
        calls = self._rest_of_calls(result)
        if rest or calls:
            out.append(answers.chunk(rid, created_s, model, content=rest or None, tool_calls=calls))
        said_by_result: dict[int, str | None] = {}
        for choice in result.all_choices():
            if choice.index == 0:
                continue
            said_by_result[choice.index] = choice.finish_reason
            rest = (choice.content or "")[len(self._sent_text(choice.index)) :]
            first = choice.index not in self._finish
            if rest or first:
                # A choice whose chunks were lost (or never written) comes whole, with its role.
                refusal = choice.refusal if first else None
                out.append(
                    answers.chunk(
                        rid,
                        created_s,
                        model,
                        index=choice.index,
                        role=first,
                        content=rest or None,
                        refusal=refusal,
                    )
                )
                self._finish.setdefault(choice.index, None)
        for index in sorted(self._finish):
            said = self._finish[index] or said_by_result.get(index)
            reason = said if said in limits.FINISH_REASONS else "stop"
            if index == 0:
                reason = answers.finish_reason_of(result)
            out.append(
                answers.chunk(
                    rid,
                    created_s,
                    model,
                    index=index,
                    finish_reason=reason,
                    system_fingerprint=result.system_fingerprint,
                )
            )
        return out


@dataclass
class _SentCall:
    """One tool call as its pieces sent so far say it."""

    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def rest_after(self, sent: _SentCall, index: int) -> dict[str, Any] | None:
        """The delta piece (as `index`) that turns `sent` into this whole call; None when nothing is
        missing."""
        rest = self.arguments[len(sent.arguments) :]
        if sent.id is not None and sent.name is not None and not rest:
            return None
        piece: dict[str, Any] = {"index": index}
        function: dict[str, Any] = {"arguments": rest}
        if sent.id is None:
            piece |= {"id": self.id, "type": "function"}
        if sent.name is None:
            function = {"name": self.name, **function}
        piece["function"] = function
        return piece
