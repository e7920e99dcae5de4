"""What the dispatcher keeps of a backend's answer besides its text and token counts: the `model`,
the `finish_reason`, the `system_fingerprint`, the `tool_calls` and the usage's `*_tokens_details`,
and each of the `choices` (at most the `n` asked) with its `refusal` and `logprobs`, checked
against the bounds in `inferq.messaging.limits` before they go into a result record (a streamed
answer's pieces are `delta_facts`').

The backend is not trusted: a value of the wrong type, out of range or too large is dropped (never
cut: a cut fingerprint or counter would be a wrong one), the answer itself still goes through, and
a log line says which field and why, never the value (it could be anything, the prompt included).
Each kind of problem is logged at WARNING once per process, then at DEBUG: a backend that always
sends the same odd value does not flood the logs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from inferq.messaging import limits, tool_rules
from inferq.messaging.records import Choice, TokenDetails

log = logging.getLogger(__name__)

_reported: set[tuple[str, str]] = set()


def model(value: object, *, asked: str) -> str:
    """The model the backend says answered ("org/name" included), when it is printable text of at
    most `limits.MAX_MODEL_CHARS`; else the one asked for."""
    if value is None:
        return asked
    if isinstance(value, str) and 0 < len(value) <= limits.MAX_MODEL_CHARS and value.isprintable():
        return value
    dropped("model", f"not printable text of 1-{limits.MAX_MODEL_CHARS} characters")
    return asked


def finish_reason(value: object) -> str | None:
    """One of `limits.FINISH_REASONS`, or None (not said, or a value the API does not have)."""
    if value is None:
        return None
    if isinstance(value, str) and value in limits.FINISH_REASONS:
        return value
    why = "not one of the API's finish reasons" if isinstance(value, str) else "not a string"
    dropped("finish_reason", why)
    return None


def system_fingerprint(value: object) -> str | None:
    """The fingerprint when it is a short identifier; None otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        dropped("system_fingerprint", "not a string")
        return None
    if limits.SYSTEM_FINGERPRINT_PATTERN.fullmatch(value) is None:
        dropped("system_fingerprint", "over 128 characters or not an identifier")
        return None
    return value


def token_details(field: str, value: object) -> TokenDetails | None:
    """The counters of a usage's `field` (`prompt_tokens_details`...): names like identifiers,
    whole numbers within an Avro int, at most `limits.MAX_TOKEN_DETAILS` of them (the first ones
    kept). A counter sent as null is left out, as the API allows; None when the map is missing or
    not an object."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        dropped(field, "not an object")
        return None
    kept: dict[str, int] = {}
    for name, count in value.items():
        if count is None:
            continue
        if not isinstance(name, str) or limits.TOKEN_DETAIL_PATTERN.fullmatch(name) is None:
            dropped(field, "a counter's name is not an identifier")
        elif isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= limits.AVRO_INT_MAX:
            dropped(field, "a counter is not a whole number within 0..2^31-1")
        elif len(kept) == limits.MAX_TOKEN_DETAILS:
            dropped(field, f"more than {limits.MAX_TOKEN_DETAILS} counters (the first kept)")
            break
        else:
            kept[name] = count
    return MappingProxyType(kept)


def tool_calls(value: object) -> str | None:
    """The assistant's `tool_calls` as a JSON text, when they are within `tool_rules`' bounds (the
    ones a caller's are held to: they come back in the next request); None otherwise. An empty
    list is none."""
    if value is None or value == []:
        return None
    return _json_text("tool_calls", value, tool_rules.tool_calls_problem(value), limits.MAX_TOOL_CALLS_CHARS)


# The OpenAI error object's `type`/`code` (e.g. "invalid_request_error"): a token, never free text.
_ERROR_TOKEN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def error_kind(text: str) -> str:
    """ " (<type or code>)" of an OpenAI error object in `text`, or "". The body may quote the
    request (a 400 naming the offending message): only an error token of it, never its message."""
    kind = ""
    with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
        error = json.loads(text)["error"]
        token = str(error.get("code") or error.get("type") or "")
        kind = f" ({token})" if _ERROR_TOKEN.fullmatch(token) else ""
    return kind


def choices(value: object, *, asked: int) -> tuple[Choice, ...]:
    """The answer's choices, numbered 0, 1, 2... in the backend's index order (the order sent when
    its indices are not distinct whole numbers), at most the `asked` (`n`, within
    `limits.MAX_CHOICES`), each with what passes its bounds. `ValueError` when there is no readable
    first choice (the answer is unreadable); a later one that is not an object with a `message`
    object is dropped."""
    if not isinstance(value, list) or not value:
        raise ValueError("no choices")
    indices = [c.get("index") if isinstance(c, dict) else None for c in value]
    whole = [i for i in indices if isinstance(i, int) and not isinstance(i, bool)]
    ordered: list[Any] = list(value)
    if len(set(whole)) == len(value):
        ordered = [c for _, c in sorted(zip(whole, value, strict=True), key=lambda pair: pair[0])]
    elif len(value) > 1:
        dropped("choices.index", "not distinct whole numbers (the order sent kept)")
    most = max(1, min(asked, limits.MAX_CHOICES))
    if len(ordered) > most:
        dropped("choices", f"more than the {most} asked (the first kept)")
        ordered = ordered[:most]
    kept: list[Choice] = []
    logprobs_left = limits.MAX_ANSWER_LOGPROBS_CHARS
    for position, choice in enumerate(ordered):
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            if position == 0:
                raise ValueError("the first choice has no message")
            dropped("choices", "a choice is not an object with a message object")
            continue
        content = message.get("content")
        scores = logprobs(choice.get("logprobs"))
        if scores is not None and len(scores) > logprobs_left:
            dropped("logprobs", f"over {limits.MAX_ANSWER_LOGPROBS_CHARS} characters in all choices")
            scores = None
        logprobs_left -= len(scores or "")
        kept.append(
            Choice(
                index=len(kept),
                # As the first choice's text always was: what the backend sent, as text.
                content=None if content is None else str(content),
                finish_reason=finish_reason(choice.get("finish_reason")),
                tool_calls=tool_calls(message.get("tool_calls")),
                refusal=refusal(message.get("refusal")),
                logprobs=scores,
            )
        )
    return tuple(kept)


def refusal(value: object) -> str | None:
    """The model's refusal message when it is text of at most `limits.MAX_REFUSAL_CHARS`."""
    if value is None:
        return None
    if not isinstance(value, str):
        dropped("refusal", "not a string")
        return None
    if len(value) > limits.MAX_REFUSAL_CHARS:
        dropped("refusal", f"over {limits.MAX_REFUSAL_CHARS} characters")
        return None
    return value


def logprobs(value: object) -> str | None:
    """A choice's `logprobs` as a JSON text, when it has OpenAI's shape (`content` and `refusal`,
    each null or a list of tokens with their `logprob`, `bytes` and `top_logprobs`), nests at most
    `limits.MAX_LOGPROBS_DEPTH` and is at most `limits.MAX_LOGPROBS_CHARS`; None otherwise."""
    if value is None:
        return None
    return _json_text("logprobs", value, logprobs_problem(value), limits.MAX_LOGPROBS_CHARS)


def _json_text(field: str, value: object, problem: str | None, most: int) -> str | None:
    """`value` as compact JSON text when it has no `problem` and is at most `most` characters;
    None (and `field` logged as dropped) otherwise."""
    if problem is None:
        text = json.dumps(value, separators=(",", ":"))
        if len(text) <= most:
            return text
        problem = f"over {most} characters"
    dropped(field, problem)
    return None


def logprobs_problem(value: object) -> str | None:
    """Why `value` is not a `logprobs` object of OpenAI's shape, or None."""
    if not isinstance(value, dict):
        return "not an object"
    if tool_rules.json_depth(value) > limits.MAX_LOGPROBS_DEPTH:
        return f"nests deeper than {limits.MAX_LOGPROBS_DEPTH} levels"
    for key in ("content", "refusal"):
        tokens = value.get(key)
        if tokens is None:
            continue
        if not isinstance(tokens, list):
            return f"{key} is not a list"
        for token in tokens:
            problem = _token_problem(token)
            if problem is None and isinstance(token, dict):
                top = token.get("top_logprobs")
                if not isinstance(top, list) or len(top) > limits.MAX_TOP_LOGPROBS:
                    problem = f"a token's top_logprobs is not a list of at most {limits.MAX_TOP_LOGPROBS}"
                else:
                    problem = next((p for p in map(_token_problem, top) if p is not None), None)
            if problem is not None:
                return f"{key}: {problem}"
    return None


def _token_problem(token: object) -> str | None:
    """One token's entry: its text, a finite `logprob`, `bytes` null or a list of byte values."""
    if not isinstance(token, dict) or not isinstance(token.get("token"), str):
        return "a token is not an object with its text"
    number = token.get("logprob")
    if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
        return "a token's logprob is not a finite number"
    raw = token.get("bytes")
    if raw is not None and not (isinstance(raw, list) and all(_byte(b) for b in raw)):
        return "a token's bytes is not a list of byte values"
    return None


def _byte(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255


def dropped(field: str, why: str) -> None:
    """Log that the backend's `field` was dropped and `why` (never the value): at WARNING the first
    time per process, then at DEBUG."""
    first = (field, why) not in _reported
    _reported.add((field, why))
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "backend's %s dropped: %s (the answer goes through without it)",
        field,
        why,
    )
