"""From the bytes of ``POST /v1/requests`` to a validated `SubmitRequest`, or the refusal saying why not."""

from __future__ import annotations

import json

from pydantic import ValidationError
from starlette.requests import Request

from services.ingest.errors import BodyTooLargeError, InvalidRequestError, MalformedBodyError
from services.ingest.validation import SubmitRequest, describe


async def read_body(request: Request, limit_bytes: int) -> bytes:
    """The whole body, refused with `BodyTooLargeError` as soon as it is known to exceed `limit_bytes`.

    A declared Content-Length over the limit is refused before reading; a body streamed without one
    is cut at the first chunk past the limit, so a client cannot make ingest buffer more than that.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise BodyTooLargeError(limit_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit_bytes:
            raise BodyTooLargeError(limit_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_submission(raw: bytes) -> SubmitRequest:
    """Parse and validate a body: `MalformedBodyError` (400) or `InvalidRequestError` (422)."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MalformedBodyError(f"body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedBodyError("body must be a JSON object")
    try:
        return SubmitRequest.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequestError(describe(exc)) from exc
