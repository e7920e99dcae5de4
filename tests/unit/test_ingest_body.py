"""Reading and parsing the POST body alone: the size limit, JSON, validation, each refusal typed."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.requests import Request
from starlette.types import Message

from inferq.ingest.body import parse_submission, read_body
from inferq.ingest.errors import BodyTooLargeError, InvalidRequestError, MalformedBodyError


class ChunkedBody:
    """An ASGI `receive` that hands out `chunks` one by one and counts how many were read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.read = 0

    async def __call__(self) -> Message:
        chunk = self.chunks[self.read]
        self.read += 1
        return {"type": "http.request", "body": chunk, "more_body": self.read < len(self.chunks)}


def request(receive: ChunkedBody, content_length: int | None = None) -> Request:
    headers = [] if content_length is None else [(b"content-length", str(content_length).encode())]
    scope = {"type": "http", "method": "POST", "path": "/v1/requests", "headers": headers}
    return Request(scope, receive)


def test_body_within_the_limit_is_read_whole():
    receive = ChunkedBody([b"ab", b"cd", b"e"])
    assert asyncio.run(read_body(request(receive), limit_bytes=5)) == b"abcde"


def test_declared_length_over_the_limit_is_refused_before_reading():
    receive = ChunkedBody([b"x" * 10])
    with pytest.raises(BodyTooLargeError) as refused:
        asyncio.run(read_body(request(receive, content_length=10), limit_bytes=5))
    assert receive.read == 0
    assert str(refused.value) == "body larger than 5 bytes"
    assert (refused.value.status_code, refused.value.limit_bytes) == (413, 5)


def test_undeclared_body_is_cut_at_the_first_chunk_past_the_limit():
    receive = ChunkedBody([b"abc", b"def", b"never read"])
    with pytest.raises(BodyTooLargeError):
        asyncio.run(read_body(request(receive), limit_bytes=5))
    assert receive.read == 2


def test_a_valid_body_becomes_a_submission():
    body = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}], "request_id": "r-1"}
    submission = parse_submission(json.dumps(body).encode())
    assert (submission.scenario, submission.request_id) == ("realtime_chat", "r-1")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "body is not valid JSON: Expecting property name enclosed in double quotes"),
        (b"\xff\xfe", "body is not valid UTF-8 (byte 0: invalid start byte)"),
        (b"[1, 2]", "body must be a JSON object"),
        (b'"text"', "body must be a JSON object"),
    ],
)
def test_what_is_not_a_json_object_is_malformed(raw, message):
    with pytest.raises(MalformedBodyError) as refused:
        parse_submission(raw)
    assert str(refused.value).startswith(message)
    assert refused.value.status_code == 400
    assert refused.value.body() == {"error": str(refused.value)}


def test_contract_breaches_name_every_field():
    raw = json.dumps({"scenario": "x", "messages": [{"role": "bot", "content": "y"}], "priority": "NOW"})
    with pytest.raises(InvalidRequestError) as refused:
        parse_submission(raw.encode())
    error = refused.value
    fields = [p["field"] for p in error.problems]
    assert fields == ["messages.0.role", "priority"]
    assert error.status_code == 422 and error.reason == "invalid"
    assert str(error).startswith("invalid request: messages.0.role: Input should be ")
    assert error.body() == {"error": str(error), "problems": error.problems}
