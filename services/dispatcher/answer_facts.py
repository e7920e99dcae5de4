"""What the dispatcher keeps of a backend's answer besides its text and token counts: the `model`,
the `finish_reason`, the `system_fingerprint`, the `tool_calls` and the usage's `*_tokens_details`,
checked against the bounds in `inferq.messaging.limits` before they go into a result record; and,
for a streamed answer, each piece's choice `index`, tool-call deltas, refusal and logprobs.

The backend is not trusted: a value of the wrong type, out of range or too large is dropped (never
cut: a cut fingerprint or counter would be a wrong one), the answer itself still goes through, and
a log line says which field and why, never the value (it could be anything, the prompt included).
Each kind of problem is logged at WARNING once per process, then at DEBUG: a backend that always
sends the same odd value does not flood the logs. A streamed tool-call piece cannot be dropped so
(the call would change): `UnusableError`, and the stream fails (``stream_reader.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from inferq.dispatcher.deltas import ToolCallDelta
from inferq.messaging import limits, tool_rules
from inferq.messaging.records import TokenDetails

log = logging.getLogger(__name__)

_reported: set[tuple[str, str]] = set()


def model(value: object, *, asked: str) -> str:
    """The model the backend says answered ("org/name" included), when it is printable text of at
    most `limits.MAX_MODEL_CHARS`; else the one asked for."""
    if value is None:
        return asked
    if isinstance(value, str) and 0 < len(value) <= limits.MAX_MODEL_CHARS and value.isprintable():
        return value
    _dropped("model", f"not printable text of 1-{limits.MAX_MODEL_CHARS} characters")
    return asked


def finish_reason(value: object) -> str | None:
    """One of `limits.FINISH_REASONS`, or None (not said, or a value the API does not have)."""
    if value is None:
        return None
    if isinstance(value, str) and value in limits.FINISH_REASONS:
        return value
    why = "not one of the API's finish reasons" if isinstance(value, str) else "not a string"
    _dropped("finish_reason", why)
    return None


def system_fingerprint(value: object) -> str | None:
    """The fingerprint when it is a short identifier; None otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        _dropped("system_fingerprint", "not a string")
        return None
    if limits.SYSTEM_FINGERPRINT_PATTERN.fullmatch(value) is None:
        _dropped("system_fingerprint", "over 128 characters or not an identifier")
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
        _dropped(field, "not an object")
        return None
    kept: dict[str, int] = {}
    for name, count in value.items():
        if count is None:
            continue
        if not isinstance(name, str) or limits.TOKEN_DETAIL_PATTERN.fullmatch(name) is None:
            _dropped(field, "a counter's name is not an identifier")
        elif isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= limits.AVRO_INT_MAX:
            _dropped(field, "a counter is not a whole number within 0..2^31-1")
        elif len(kept) == limits.MAX_TOKEN_DETAILS:
            _dropped(field, f"more than {limits.MAX_TOKEN_DETAILS} counters (the first kept)")
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
    problem = tool_rules.tool_calls_problem(value)
    if problem is not None:
        _dropped("tool_calls", problem)
        return None
    text = json.dumps(value, separators=(",", ":"))
    if len(text) > limits.MAX_TOOL_CALLS_CHARS:
        _dropped("tool_calls", f"over {limits.MAX_TOOL_CALLS_CHARS} characters")
        return None
    return text


class UnusableError(ValueError):
    """A streamed piece that cannot be dropped without changing the answer (a tool call's): the
    stream fails. Its message is a short reason, never the value."""


def tool_call_deltas(value: object) -> tuple[ToolCallDelta, ...]:
    """A streamed delta's `tool_calls` pieces (OpenAI's delta shape): each an `index` within
    `MAX_TOOL_CALLS`, and optionally an `id` (`TOOL_CALL_ID_PATTERN`), `type` "function" and a
    `function` with a `name` (`TOOL_NAME_PATTERN`) and `arguments` text. `UnusableError` otherwise
    (the sizes of the assembled calls are the stream reader's to bound)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > limits.MAX_TOOL_CALLS:
        raise UnusableError(f"not a list of at most {limits.MAX_TOOL_CALLS}")
    return tuple(_tool_call_delta(piece) for piece in value)


def _tool_call_delta(piece: object) -> ToolCallDelta:
    if not isinstance(piece, dict):
        raise UnusableError("a piece is not an object")
    index = piece.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < limits.MAX_TOOL_CALLS:
        raise UnusableError(f"index not within 0..{limits.MAX_TOOL_CALLS - 1}")
    call_id = piece.get("id")
    if call_id is not None and (
        not isinstance(call_id, str) or not limits.TOOL_CALL_ID_PATTERN.fullmatch(call_id)
    ):
        raise UnusableError("id not an identifier")
    if piece.get("type") not in (None, "function"):
        raise UnusableError('type not "function"')
    function = piece.get("function") or {}
    if not isinstance(function, dict):
        raise UnusableError("function not an object")
    name = function.get("name")
    if name is not None and (not isinstance(name, str) or not limits.TOOL_NAME_PATTERN.fullmatch(name)):
        raise UnusableError("function.name not a name")
    arguments = function.get("arguments") or ""
    if not isinstance(arguments, str) or len(arguments) > limits.MAX_TOOL_ARGUMENTS_CHARS:
        raise UnusableError(f"arguments not text of at most {limits.MAX_TOOL_ARGUMENTS_CHARS}")
    return ToolCallDelta(index, call_id, name, arguments)


def choice_index(value: object, *, asked: int) -> int | None:
    """A streamed choice's `index` when it is one of the `asked` choices; None (the choice's delta
    dropped) otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < asked:
        return value
    _dropped("choices[].index", f"not a choice asked for (0..{asked - 1})")
    return None


def refusal(value: object) -> str:
    """A streamed piece of refusal text; "" for none or a value that is not text."""
    if value is None or isinstance(value, str):
        return value or ""
    _dropped("delta.refusal", "not a string")
    return ""


def logprobs_content(value: object) -> tuple[Mapping[str, Any], ...]:
    """The entries of a streamed choice's `logprobs.content` (one object per token), when there are
    at most `MAX_STREAM_LOGPROBS_CHARS` of compact JSON of them; () otherwise."""
    if value is None:
        return ()
    content = value.get("content") if isinstance(value, dict) else ()
    if content is None:
        return ()
    if not isinstance(content, list) or not all(isinstance(entry, dict) for entry in content):
        _dropped("logprobs", "content not a list of objects")
        return ()
    try:
        size = len(json.dumps(content, separators=(",", ":")))
    except (ValueError, TypeError, RecursionError):
        size = limits.MAX_STREAM_LOGPROBS_CHARS + 1
    if size > limits.MAX_STREAM_LOGPROBS_CHARS or tool_rules.json_depth(content) > limits.MAX_TOOL_JSON_DEPTH:
        _dropped("logprobs", f"over {limits.MAX_STREAM_LOGPROBS_CHARS} characters or too deep")
        return ()
    return tuple(content)


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


def _dropped(field: str, why: str) -> None:
    first = (field, why) not in _reported
    _reported.add((field, why))
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "backend's %s dropped: %s (the answer goes through without it)",
        field,
        why,
    )
