"""JSON from an untrusted body, parsed within bounds: UTF-8, nesting depth, number size, no NaN.

Python's `json` would answer a hostile body with an exception no refusal names: a body nested
100,000 levels deep raises `RecursionError`, a 5,000-digit integer `ValueError` (CPython's
4,300-digit conversion limit), ``1e999`` becomes infinity and ``NaN`` a float nobody can encode. So
the text is checked before it is parsed, in linear time and with C-speed string operations only
(no per-character Python loop: a 1 MiB body of brackets costs milliseconds):

1. strict UTF-8 decoding;
2. string literals are set aside, so brackets and digits inside text do not count;
3. nesting depth: matched ``[]``/``{}`` pairs are removed one level per pass, at most
   `max_depth` passes; whatever still nests is refused, and so are unbalanced brackets that
   would take the parser deeper than `max_depth` before it found the error;
4. number tokens longer than `max_number_chars` are refused.

Then `json.loads` parses it, refusing ``NaN``/``Infinity``, non-finite floats and duplicate keys
(two parsers could read a duplicated key differently). Every refusal is a `JsonRefusedError` whose
message says which rule the body broke.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_NOT_BRACKET = "".join(chr(c) for c in range(128) if chr(c) not in "[]{}")
_BRACKETS_ONLY = str.maketrans("", "", _NOT_BRACKET)


def _outside_strings(text: str) -> str:
    """The text with every string literal's content removed (quotes and all).

    Escaped backslashes, then escaped quotes, are dropped first, so every remaining quote opens or
    closes a literal and the text splits into outside / inside / outside / ... at C speed.
    """
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    return "".join(unescaped.split('"')[::2])


class JsonRefusedError(ValueError):
    """The body is not JSON within the bounds; the message names the broken rule."""


def _number_token(max_chars: int) -> re.Pattern[str]:
    return re.compile(rf"[-+0-9.eE]{{{max_chars + 1},}}")


def _nesting_problem(brackets: str, max_depth: int) -> str | None:
    """Why `brackets` (the body's bracket characters, in order) may not be parsed, or None.

    Each pass removes the innermost matched pairs, one level. A balanced body is within bounds when
    it empties in `max_depth` passes. Whatever cannot be paired up is a syntax error the parser
    reports itself, unless it opens more than `max_depth` levels the parser would descend first.
    """
    for _ in range(max_depth):
        if not brackets:
            return None
        reduced = brackets.replace("[]", "").replace("{}", "")
        if reduced == brackets:
            break
        brackets = reduced
    else:
        if not brackets:
            return None
        if "[]" in brackets or "{}" in brackets:
            return f"body nests deeper than {max_depth} levels"
    # An unbalanced leftover: the parser's depth is at most the levels removed plus its openers.
    openers = brackets.count("[") + brackets.count("{")
    if openers > max_depth:
        return f"body is not valid JSON: {openers} brackets are never closed"
    return None


def _refuse_constant(name: str) -> Any:
    raise JsonRefusedError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefusedError(f"number {text[:20]} is out of range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise JsonRefusedError("an object has the same key twice")
    return obj


class JsonGuard:
    """Parses a JSON body within `max_depth` levels of nesting and `max_number_chars` per number."""

    def __init__(self, *, max_depth: int, max_number_chars: int) -> None:
        if max_depth < 1 or max_number_chars < 1:
            raise ValueError("max_depth and max_number_chars must be >= 1")
        self.max_depth = max_depth
        self.max_number_chars = max_number_chars
        self._long_number = _number_token(max_number_chars)

    def loads(self, raw: bytes) -> Any:
        """The parsed value, or `JsonRefusedError` saying which bound the body broke."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonRefusedError(f"body is not valid UTF-8 (byte {exc.start}: {exc.reason})") from exc
        structure = _outside_strings(text)
        nesting = _nesting_problem(structure.translate(_BRACKETS_ONLY), self.max_depth)
        if nesting is not None:
            raise JsonRefusedError(nesting)
        if self._long_number.search(structure):
            raise JsonRefusedError(f"body has a number longer than {self.max_number_chars} characters")
        try:
            return json.loads(
                text,
                parse_constant=_refuse_constant,
                parse_float=_finite_float,
                object_pairs_hook=_unique_keys,
            )
        except json.JSONDecodeError as exc:
            raise JsonRefusedError(f"body is not valid JSON: {exc}") from exc
        except (RecursionError, ValueError) as exc:
            if isinstance(exc, JsonRefusedError):
                raise
            # Not reachable within the bounds above; a refusal still beats a 500 if it ever is.
            raise JsonRefusedError("body is not JSON within the limits") from exc
