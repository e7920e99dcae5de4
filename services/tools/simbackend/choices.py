"""The simulated model's sync `chat.completion`: `n` choices, `logprobs` when asked, and a refusal
when a test asks for one. (Streamed answers are `streaming.py`'s.)

- `n`: choice 0 is `protocol.answer`'s; choice i answers "sim reply <i+1> to: ..." (so the choices
  differ, and a tight `max_tokens` may cut one and not another); the usage counts every choice.
- `logprobs: true`: each choice's `logprobs.content` lists its tokens (`CHARS_PER_TOKEN` characters
  each, as `protocol.count_tokens` counts), each with a deterministic `logprob` in (-1, 0], its UTF-8
  `bytes` and `top_logprobs` alternatives (`top_logprobs` of them, the token itself first, each
  less likely than the one before), OpenAI's shape.
- A refusal: when the last user message contains `REFUSE_MARKER`, every choice declines, as
  OpenAI's models do: `content` null, `message.refusal` the reason, finish_reason "stop" (with
  `logprobs`, its tokens under `logprobs.refusal`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from inferq.dispatcher.rate_budget import CHARS_PER_TOKEN
from inferq.tools.simbackend.protocol import (
    SYSTEM_FINGERPRINT,
    Answer,
    ChatCompletionRequest,
    answer,
    count_tokens,
)

# Put this in the last user message to be refused (a test's deterministic trigger).
REFUSE_MARKER = "[sim:refuse]"
REFUSAL_TEXT = "I'm sorry, I can't help with that (simulated refusal)."


def completion(request: ChatCompletionRequest, *, completion_id: str, created_s: int) -> dict[str, object]:
    """The `chat.completion` of `request`: its `n` choices, their usage summed."""
    refused = _asks_refusal(request)
    replies = [answer(request, choice=i) for i in range(request.n)]
    choices = [_choice(i, reply, request, refused=refused) for i, reply in enumerate(replies)]
    spent = sum(count_tokens(REFUSAL_TEXT) if refused else r.completion_tokens for r in replies)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created_s,
        "model": request.model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
        "usage": replace(replies[0], completion_tokens=spent).usage(),
    }


def _asks_refusal(request: ChatCompletionRequest) -> bool:
    users = [m for m in request.messages if m.role == "user"]
    return bool(users) and REFUSE_MARKER in users[-1].text()


def _choice(index: int, reply: Answer, request: ChatCompletionRequest, *, refused: bool) -> dict[str, Any]:
    if refused:
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": REFUSAL_TEXT}
        finish_reason = "stop"
    else:
        message = reply.message() | {"refusal": None}
        finish_reason = reply.finish_reason
    logprobs = None
    if request.logprobs:
        tokens = logprobs_of(_pieces(REFUSAL_TEXT if refused else reply.content), request.top_logprobs or 0)
        logprobs = {"content": None, "refusal": tokens} if refused else {"content": tokens, "refusal": None}
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish_reason}


def _pieces(text: str) -> list[str]:
    return [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def logprobs_of(tokens: list[str], top: int) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content` for `tokens`, each with `top` alternatives."""
    entries = []
    for position, token in enumerate(tokens):
        logprob = -((position % 8) / 8)
        alternatives = [token] + [f"{token}~{k}" for k in range(1, top)]
        entries.append(
            {
                "token": token,
                "logprob": logprob,
                "bytes": list(token.encode("utf-8")),
                "top_logprobs": [
                    {"token": alt, "logprob": logprob - k, "bytes": list(alt.encode("utf-8"))}
                    for k, alt in enumerate(alternatives[:top])
                ],
            }
        )
    return entries
