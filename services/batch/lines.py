"""A batch file's lines as submissions.

Each non-blank line is a JSON object: ``messages`` (chat messages) or ``prompt`` (one user
message), and optionally any field of ``POST /v1/requests`` (``scenario`` overrides the command's,
``request_id``, ``session_id``, ``priority``, ``deadline_ms``, ``params``, ``model``,
``estimated_tokens``). ``params`` takes every parameter ``POST /v1/requests`` does (tools,
tool_choice, response_format, logit_bias, metadata...); messages keep their function-calling
fields. A line is checked with ingest's own rules (`SubmitRequest`) before anything is sent, so a
bad line is found with its number, not as a 422 halfway through.

Request ids are deterministic: the line's own ``request_id``, else ``b-<batch>-<line number>``
where ``<batch>`` is 16 hex digits of the SHA-256 of the batch id (``--batch-id``), or of the file's
bytes when none is given. A rerun of the same file therefore sends the same ids, and two different
files (or the same file given two batch ids, e.g. one per day) never share one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inferq.client.models import Submission
from inferq.ingest.validation import SubmitRequest, describe
from inferq.messaging.tiers import Tier

# A line longer than this is refused unread: ingest's body limit is about 1 MB.
MAX_LINE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class BatchLine:
    """Line `number` (1-based) of the file: its `submission`, or the `problem` that makes it bad."""

    number: int
    request_id: str
    submission: Submission | None = None
    problem: str | None = None


def batch_key(path: Path, batch_id: str | None = None) -> str:
    """16 hex digits naming the batch: of `batch_id` when given, else of the file's bytes."""
    digest = hashlib.sha256()
    if batch_id is not None:
        digest.update(b"id:" + batch_id.encode())
    else:
        digest.update(b"file:")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def request_id_for(key: str, number: int) -> str:
    return f"b-{key}-{number}"


def parse_line(raw: bytes, number: int, *, key: str, scenario: str) -> BatchLine:
    """One line as a `BatchLine` (never raises: a bad line carries its problem)."""
    default_id = request_id_for(key, number)
    if len(raw) > MAX_LINE_BYTES:
        return BatchLine(number, default_id, problem=f"line is longer than {MAX_LINE_BYTES} bytes")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return BatchLine(number, default_id, problem=f"not JSON ({exc.msg} at column {exc.colno})")
    except UnicodeDecodeError:
        return BatchLine(number, default_id, problem="not UTF-8 text")
    if not isinstance(value, dict):
        return BatchLine(number, default_id, problem="not a JSON object")
    fields: dict[str, Any] = {"scenario": scenario} | value
    prompt = fields.pop("prompt", None)
    if prompt is not None:
        if "messages" in fields:
            return BatchLine(number, default_id, problem="give prompt or messages, not both")
        fields["messages"] = [{"role": "user", "content": prompt}]
    fields.setdefault("request_id", default_id)
    try:
        body = SubmitRequest.model_validate(fields)
    except ValidationError as exc:
        summary = "; ".join(f"{p['field']}: {p['problem']}" for p in describe(exc))
        rid = fields["request_id"] if isinstance(fields["request_id"], str) else default_id
        return BatchLine(number, rid[:128], problem=summary)
    if body.tenant != "default" or body.reply_to is not None or body.expire_at_ms is not None:
        return BatchLine(
            number, default_id, problem="tenant, reply_to and expire_at_ms are the command's to set"
        )
    request_id = body.request_id or default_id
    submission = Submission(
        scenario=body.scenario,
        # As the line gave them: an assistant's tool_calls, a tool message's tool_call_id, a name.
        messages=[m.model_dump(exclude_none=True) for m in body.messages],
        request_id=request_id,
        session_id=body.session_id,
        priority=Tier(body.priority) if body.priority is not None else None,
        deadline_ms=body.deadline_ms,
        model=body.model,
        params=body.params.as_json_values() if body.params is not None else None,
        estimated_tokens=body.estimated_tokens,
    )
    return BatchLine(number, request_id, submission=submission)


def read_lines(path: Path, *, key: str, scenario: str) -> Iterator[BatchLine]:
    """Every non-blank line of `path`, in order (blank lines are not requests and are skipped)."""
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if raw.strip():
                yield parse_line(raw, number, key=key, scenario=scenario)


def duplicate_ids(lines: list[BatchLine]) -> dict[int, int]:
    """Lines whose request id an earlier line already has: {line: the earlier line}."""
    first: dict[str, int] = {}
    repeated: dict[int, int] = {}
    for line in lines:
        if line.request_id in first:
            repeated[line.number] = first[line.request_id]
        else:
            first[line.request_id] = line.number
    return repeated
