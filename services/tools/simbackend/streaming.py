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
then ``data: [DONE]``; every chunk carries the `system_fingerprint`.

A dropped stream (the fault `stream_drop_rate`) sends half the tokens (at least one), then breaks
the connection without the last chunk or ``[DONE]``, as a provider's load balancer cutting a long
response does: the client sees a response that ends early.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from inferq.dispatcher.rate_budget import CHARS_PER_TOKEN
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


def deltas(reply: Answer) -> list[dict[str, Any]]:
    """The answer's deltas, one per token: its text, or its tool calls in OpenAI's delta shape."""
    if not reply.tool_calls:
        return [{"content": token} for token in reply.tokens()]
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
    reply: Answer,
    plan: StreamPlan,
    *,
    model: str,
    completion_id: str,
    created_s: int,
    include_usage: bool,
    sleep: Callable[[float], Awaitable[None]],
) -> AsyncIterator[bytes]:
    """The response body of a streamed call, paced by `sleep`."""

    def chunk(delta: dict[str, Any], finish_reason: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
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

    tokens = deltas(reply)
    sent = plan.tokens_sent(len(tokens))
    yield chunk({"role": "assistant", "content": ""}, None)
    for pause_s, token in zip(plan.pauses_s(len(tokens))[:sent], tokens[:sent], strict=True):
        await sleep(pause_s)
        yield chunk(token, None)
    if plan.drop:
        raise StreamDroppedError(f"simulated drop after {sent} of {len(tokens)} tokens")
    if not tokens:
        await sleep(plan.latency_s)
    yield chunk({}, reply.finish_reason)
    if include_usage:
        usage = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created_s,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [],
            "usage": reply.usage(),
        }
        yield event(usage)
    yield DONE
