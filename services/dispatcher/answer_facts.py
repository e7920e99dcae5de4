"""What the dispatcher keeps of a backend's answer besides its text and token counts: the `model`,
the `finish_reason`, the `system_fingerprint`, the `tool_calls` and the usage's `*_tokens_details`,
checked against the bounds in `inferq.messaging.limits` before they go into a result record.

The backend is not trusted: a value of the wrong type, out of range or too large is dropped (never
cut: a cut fingerprint or counter would be a wrong one), the answer itself still goes through, and
a log line says which field and why, never the value (it could be anything, the prompt included).
Each kind of problem is logged at WARNING once per process, then at DEBUG: a backend that always
sends the same odd value does not flood the logs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from types import MappingProxyType

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


def _dropped(field: str, why: str) -> None:
    first = (field, why) not in _reported
    _reported.add((field, why))
    log.log(
        logging.WARNING if first else logging.DEBUG,
        "backend's %s dropped: %s (the answer goes through without it)",
        field,
        why,
    )
