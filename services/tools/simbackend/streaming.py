"""A streamed answer: OpenAI `chat.completion.chunk` server-sent events, paced like a real model.

The call's latency (from the latency model) is spread the way a streaming LLM spends it: a share
of it before the first token (the prompt's prefill, `first_token_share`), the rest evenly between
the tokens. So a streamed call takes as long as the same call unstreamed, and its first token
arrives `first_token_share` of the way in.

The events, as OpenAI sends them: a first chunk with the assistant's role and empty content, one
chunk per token, a last chunk with an empty delta and the `finish_reason`; an answer that calls
tools streams each call in OpenAI's delta shape instead of text (a first piece with the call's
`index`, `id`, `type` and function `name`, then its `arguments` a token at a time), then ends with
`finish_reason` "tool_calls"; with
`stream_options.include_usage` a chunk with no choices and the usage (its details objects too),
then ``data: [DONE]``; every chunk carries the `system_fingerprint`. With `n` > 1 each choice
(`choices.py`'s answers) streams its own chunks, interleaved token by token, each with its `index`;
with `logprobs` each text token's chunk carries its `logprobs.content` entry (`choices.logprobs_of`).

A dropped stream (the fault `stream_drop_rate`) sends half the tokens (at least one), then breaks
the connection without the last chunk or ``[DONE]``, as a provider's load balancer cutting a long
response does: the client sees a response that ends early.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from inferq.dispatcher.rate_budget import CHARS_PER_TOKEN
from inferq.tools.simbackend.choices import logprobs_of
from inferq.tools.simbackend.hangup import Progress
from inferq.tools.simbackend.protocol import SYSTEM_FINGERPRINT, Answer

DONE = b"data: [DONE]\n\n"


class StreamDroppedError(Exception):
    """Raised inside the response to break the connection mid-stream (an injected fault)."""


@dataclass(frozen=True)
class StreamPlan:
    """How one streamed answer is paced and whether it is dropped."""

    latency_s: float
    first_token_share: float
    drop: bool = False

    def pauses_s(self, tokens: int) -> list[float]:
        """The pause before each token: the first token's share, then the rest evenly spread."""
        first = self.latency_s * self.first_token_share
        if tokens <= 1:
            return [self.latency_s] if tokens == 1 else []
        gap = (self.latency_s - first) / (tokens - 1)
        return [first] + [gap] * (tokens - 1)

    def tokens_sent(self, tokens: int) -> int:
        """How many tokens go out: all, or half (at least one) of a dropped stream."""
        return max(1, tokens // 2) if self.drop and tokens else tokens


def deltas(reply: Answer, top_logprobs: int | None = None) -> list[dict[str, Any]]:
    """The answer's deltas, one per token: its text (with its `logprobs` entry when `top_logprobs`
    is given), or its tool calls in OpenAI's delta shape. Each is a choice's `delta`, or with
    logprobs a `{"delta", "logprobs"}` pair (see `_choice`)."""
    if not reply.tool_calls:
        tokens = reply.tokens()
        if top_logprobs is None:
            return [{"content": token} for token in tokens]
        entries = logprobs_of(tokens, top_logprobs)
        return [{"content": t, "logprobs": {"content": [e]}} for t, e in zip(tokens, entries, strict=True)]
    out: list[dict[str, Any]] = []
    for index, call in enumerate(reply.tool_calls):
        function = call["function"]
        head = {"name": function["name"], "arguments": ""}
        out.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": head}]})
        arguments = function["arguments"]
        for start in range(0, len(arguments), CHARS_PER_TOKEN):
            piece = {"arguments": arguments[start : start + CHARS_PER_TOKEN]}
            out.append({"tool_calls": [{"index": index, "function": piece}]})
    return out


def event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


async def sse_events(
    replies: list[Answer],
    plan: StreamPlan,
    *,
    model: str,
    completion_id: str,
    created_s: int,
    include_usage: bool,
    sleep: Callable[[float], Awaitable[None]],
    top_logprobs: int | None = None,
    progress: Progress | None = None,
) -> AsyncIterator[bytes]:
    """The response body of a streamed call answering `replies` (one per choice), paced by `sleep`
    (one pause per token of the longest choice); logprobs when `top_logprobs` is given; each token
    counted in `progress` as it is generated."""

    def chunk(delta: dict[str, Any], finish_reason: str | None, index: int = 0) -> bytes:
        logprobs = delta.pop("logprobs", None)
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return event(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created_s,
                "model": model,
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [choice],
            }
        )

    each = [deltas(reply, top_logprobs) for reply in replies]
    steps = max(len(tokens) for tokens in each)
    sent = plan.tokens_sent(steps)
    for index in range(len(replies)):
        yield chunk({"role": "assistant", "content": ""}, None, index)
    for step, pause_s in enumerate(plan.pauses_s(steps)[:sent]):
        await sleep(pause_s)
        generated = [(index, tokens[step]) for index, tokens in enumerate(each) if step < len(tokens)]
        if progress is not None:
            progress.tokens += len(generated)
        for index, token in generated:
            yield chunk(dict(token), None, index)
    if plan.drop:
        raise StreamDroppedError(f"simulated drop after {sent} of {steps} tokens")
    if not steps:
        await sleep(plan.latency_s)
    for index, reply in enumerate(replies):
        yield chunk({}, reply.finish_reason, index)
    if include_usage:
        usage = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created_s,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [],
            "usage": replace(replies[0], completion_tokens=sum(r.completion_tokens for r in replies)).usage(),
        }
        yield event(usage)
    yield DONE
