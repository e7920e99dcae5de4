"""The JSON guard alone: bounds checked before parsing, in linear time, with exact messages."""

from __future__ import annotations

import json
import time

import pytest

from inferq.ingest.json_guard import JsonGuard, JsonRefusedError

GUARD = JsonGuard(max_depth=4, max_number_chars=10)


@pytest.mark.parametrize(
    "raw",
    [
        b"[[[[1]]]]",
        b'{"a": {"b": {"c": [1]}}}',
        b'{"text": "[[[[[[[[[[{{{{{{ 12345678901234567890"}',
        b'{"escaped": "\\"[[[[[[[\\\\"}',
        b'{"n": -1.25e+9}',
        b'{"a": [], "b": {}, "c": [[], [[]]]}',
    ],
)
def test_json_within_the_bounds_parses_as_json_does(raw):
    assert GUARD.loads(raw) == json.loads(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"[[[[[1]]]]]", "body nests deeper than 4 levels"),
        (b'{"a": {"b": {"c": {"d": {}}}}}', "body nests deeper than 4 levels"),
        (b"[" * 100_000, "body is not valid JSON: 100000 brackets are never closed"),
        (b"]" + b"[" * 5 + b"]" * 5, "body nests deeper than 4 levels"),
        (b'{"n": 12345678901}', "body has a number longer than 10 characters"),
        (b'{"n": NaN}', "NaN is not a JSON number"),
        (b'{"n": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"n": 1e999}', "number 1e999 is out of range"),
        (b'{"k": 1, "k": 2}', "an object has the same key twice"),
        (b'{"k": "\xff"}', "body is not valid UTF-8 (byte 7: invalid start byte)"),
        (b"{", "body is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2"),
    ],
)
def test_json_past_a_bound_is_refused_saying_which(raw, message):
    with pytest.raises(JsonRefusedError) as refused:
        GUARD.loads(raw)
    assert str(refused.value).startswith(message)


def test_a_mebibyte_of_brackets_is_refused_in_linear_time():
    guard = JsonGuard(max_depth=32, max_number_chars=40)
    for raw in (b"[" * 1_048_576, b"[]" * 524_288, b"[" * 500_000 + b"]" * 500_000):
        started = time.monotonic()
        with pytest.raises(JsonRefusedError):
            guard.loads(raw + b"x")
        assert time.monotonic() - started < 1.0


def test_the_bounds_must_be_positive():
    with pytest.raises(ValueError, match=">= 1"):
        JsonGuard(max_depth=0, max_number_chars=10)
