"""What the dispatcher keeps of each piece of a streamed answer: the choice `index` it belongs to,
its tool-call deltas and its `logprobs`, checked against the bounds in `inferq.messaging.limits`
(the whole answer's values are `answer_facts`').

What only informs (an index not asked for, logprobs out of shape) is dropped as `answer_facts`
drops a value, with a log line naming the field. A tool-call piece cannot be dropped so (the call
would change): `UnusableError`, and the stream fails (``stream_reader.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from inferq.dispatcher import answer_facts
from inferq.dispatcher.deltas import ToolCallDelta
from inferq.messaging import limits


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
    answer_facts.dropped("choices[].index", f"not a choice asked for (0..{asked - 1})")
    return None


def logprobs_content(value: object) -> tuple[Mapping[str, Any], ...]:
    """The entries of a streamed choice's `logprobs.content` (one object per token), checked as a
    whole answer's `logprobs` are (`answer_facts.logprobs`), when there are at most
    `MAX_STREAM_LOGPROBS_CHARS` of compact JSON of them; () otherwise."""
    if value is None:
        return ()
    problem = answer_facts.logprobs_problem(value)
    content = value.get("content") if isinstance(value, dict) else None
    if (
        problem is None
        and len(json.dumps(content or [], separators=(",", ":"))) > limits.MAX_STREAM_LOGPROBS_CHARS
    ):
        problem = f"over {limits.MAX_STREAM_LOGPROBS_CHARS} characters in one piece"
    if problem is not None:
        answer_facts.dropped("logprobs", problem)
        return ()
    return tuple(content or ())
