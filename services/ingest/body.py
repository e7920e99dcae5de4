"""From the bytes of ``POST /v1/requests`` to a validated `SubmitRequest`, or the refusal saying why not."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError
from starlette.requests import ClientDisconnect, Request

from inferq.ingest.errors import (
    BodyIncompleteError,
    BodyTimeoutError,
    BodyTooLargeError,
    InvalidRequestError,
    MalformedBodyError,
)
from inferq.ingest.json_guard import JsonGuard, JsonRefusedError
from inferq.ingest.validation import SubmitRequest, deadline_conflict, describe

# Only the nesting a request has (body > messages > message, params > response_format), with room.
DEFAULT_MAX_JSON_DEPTH = 32
# 2^63 has 19 digits; a float with a sign, 17 significant digits and an exponent fits in 40.
DEFAULT_MAX_NUMBER_CHARS = 40
_DEFAULT_GUARD = JsonGuard(max_depth=DEFAULT_MAX_JSON_DEPTH, max_number_chars=DEFAULT_MAX_NUMBER_CHARS)


async def read_body(request: Request, limit_bytes: int, *, timeout_s: float | None = None) -> bytes:
    """The whole body, refused as soon as it is known to be wrong.

    - A declared Content-Length over the limit is refused (413) before reading; one that is not a
      number, or that the body's length contradicts, is refused (400).
    - A body streamed without one is cut at the first chunk past the limit (413), so a client cannot
      make ingest buffer more than that.
    - The whole body must arrive within `timeout_s` (408, connection closed): uvicorn times out
      neither a slow body nor a stalled one, so a slow sender would hold its connection forever.
    """
    declared_text = request.headers.get("content-length")
    declared: int | None = None
    if declared_text is not None:
        if not declared_text.isascii() or not declared_text.isdigit():
            raise MalformedBodyError("Content-Length is not a number of bytes")
        declared = int(declared_text)
        if declared > limit_bytes:
            raise BodyTooLargeError(limit_bytes)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit_bytes:
                    raise BodyTooLargeError(limit_bytes)
                chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyTimeoutError(timeout_s or 0.0, size) from exc
    except ClientDisconnect as exc:
        # Nobody reads the answer; it is still counted, and no traceback is logged for it.
        raise BodyIncompleteError("client disconnected before the body ended") from exc
    if declared is not None and size != declared:
        raise MalformedBodyError(f"body is {size} bytes but its Content-Length says {declared}")
    return b"".join(chunks)


def load_object(raw: bytes, guard: JsonGuard = _DEFAULT_GUARD) -> dict[str, Any]:
    """The body as a JSON object within `guard`'s bounds, else `MalformedBodyError` (400)."""
    try:
        data = guard.loads(raw)
    except JsonRefusedError as exc:
        raise MalformedBodyError(str(exc)) from exc
    if not isinstance(data, dict):
        raise MalformedBodyError("body must be a JSON object")
    return data


def parse_submission(raw: bytes, guard: JsonGuard = _DEFAULT_GUARD) -> SubmitRequest:
    """Parse and validate a body: `MalformedBodyError` (400) or `InvalidRequestError` (422)."""
    data = load_object(raw, guard)
    try:
        submission = SubmitRequest.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequestError(describe(exc)) from exc
    conflict = deadline_conflict(submission)
    if conflict:
        raise InvalidRequestError(conflict, reason="deadline_conflict")
    return submission
