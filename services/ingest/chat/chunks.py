"""A streamed chat completion's chunks, as OpenAI sends them, from the chunk records and the result.

Each chunk record becomes one ``chat.completion.chunk`` of its choice (`index`): its text, refusal,
tool-call deltas (OpenAI's `delta.tool_calls`: a call's `index`, its `id`, `type` and function `name`
on its first piece, `arguments` in pieces) and logprobs; a choice's first chunk after the first
choice's carries the role. Finish reasons wait for the end: the result may still carry text or
tool calls the records did not (a dispatcher that did not stream, chunks a slow reader lost), and
they must come before the choice ends.

The end (`StreamedAnswer.ending`): the first choice's text not sent yet and, when no chunk carried
them, its tool calls (from the result), then each choice's finish: the first choice's the result's
`finish_reason`, the others' as their chunks said.
"""

from __future__ import annotations

from typing import Any

from inferq.ingest.chat import answers
from inferq.messaging import limits
from inferq.messaging.records import InferenceChunk, InferenceResult


class StreamedAnswer:
    """What one caller's stream has been sent: each choice's chunks, and its end."""

    def __init__(self, request_id: str, created_s: int) -> None:
        self._request_id = request_id
        self._created_s = created_s
        # The first choice's text sent (the result's output must continue it).
        self._text: list[str] = []
        self._sent_tool_calls = False
        # Every choice seen (the first one's role went out first), and each one's finish as said.
        self._finish: dict[int, str | None] = {0: None}

    @property
    def text(self) -> str:
        """The first choice's text sent so far."""
        return "".join(self._text)

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
        if index == 0:
            self._text.append(record.delta)
            self._sent_tool_calls = self._sent_tool_calls or bool(calls)
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
        """The chunks that end an OK result's stream (the usage chunk aside): what the first choice
        did not send yet, then every choice's finish. The caller has checked that the result's
        output continues `text`."""
        rid, created_s, model = self._request_id, self._created_s, result.model
        out: list[dict[str, Any]] = []
        rest = (result.output or "")[len(self.text) :]
        calls = None if self._sent_tool_calls else result.openai_tool_calls()
        if rest or calls:
            listed = enumerate(calls or ())
            delta_calls = [{"index": i, **call} for i, call in listed if isinstance(call, dict)]
            out.append(answers.chunk(rid, created_s, model, content=rest or None, tool_calls=delta_calls))
        for index in sorted(self._finish):
            said = self._finish[index]
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
