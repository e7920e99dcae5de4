"""The OpenAI embeddings body (`EmbeddingBody`): ``POST /v1/embeddings`` before its record
(`inferq.ingest.chat.embedding_record`).

OpenAI's fields: `model`, `input` (one text or a list of texts; token-id arrays are refused as
unsupported: inferq queues text), `dimensions`, `encoding_format` (`float` or `base64`; the Python
SDK asks base64 unless told otherwise) and `user`. The texts and `dimensions` obey
`embedding_rules` (``limits.py``): how many texts, how long each, how many dimensions, and the
bytes of the vectors they ask for, so a result fits its reply topic. A problem is a 400 naming
the parameter as OpenAI does (``input``, ``input[3]``, ``dimensions``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inferq.ingest.body import load_object
from inferq.ingest.chat.body import body_error
from inferq.ingest.chat.errors import ChatBodyError
from inferq.ingest.json_guard import JsonGuard
from inferq.ingest.validation import describe
from inferq.messaging import embedding_rules, limits

UNSUPPORTED_INPUT = "inferq does not support token arrays as input: send the text"


class EmbeddingBody(BaseModel):
    """The OpenAI body; `input` is checked by hand (`texts`): its shapes are OpenAI's, not a model's."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(strict=True, min_length=1, max_length=limits.MAX_MODEL_CHARS)
    input: Any
    dimensions: int | None = Field(default=None, strict=True)
    encoding_format: Literal["float", "base64"] | None = None
    user: str | None = Field(default=None, strict=True, max_length=limits.MAX_END_USER_CHARS)

    @property
    def base64(self) -> bool:
        return self.encoding_format == "base64"


def parse_embedding_body(raw: bytes, guard: JsonGuard) -> tuple[EmbeddingBody, tuple[str, ...]]:
    """The body of `raw` and its texts: `MalformedBodyError` (400) for what is not JSON within the
    bounds, `ChatBodyError` (400) for a parameter OpenAI does not have, a value out of shape, or
    texts and dimensions out of `embedding_rules`' bounds."""
    data = load_object(raw, guard)
    for key in data:
        if key not in EmbeddingBody.model_fields:
            name = str(key)[:64].encode("utf-8", "backslashreplace").decode("utf-8")
            raise ChatBodyError(
                f"Unrecognized request argument supplied: {name}", param=name, code="unknown_parameter"
            )
    try:
        body = EmbeddingBody.model_validate(data)
    except ValidationError as exc:
        raise body_error(describe(exc), {}) from exc
    texts = _texts(body.input)
    problem = embedding_rules.inputs_problem(texts)
    if problem is not None:
        raise ChatBodyError(problem, param=_param_of(problem))
    for name, problem in (
        ("dimensions", embedding_rules.dimensions_problem(body.dimensions)),
        ("input", embedding_rules.result_size_problem(len(texts), body.dimensions)),
    ):
        if problem is not None:
            raise ChatBodyError(problem, param=name)
    return body, texts


def _texts(value: Any) -> tuple[str, ...]:
    """`input` as texts: one string, or a list of strings; a token array (of integers, or a list of
    them) is named unsupported, anything else invalid."""
    if isinstance(value, str):
        texts: tuple[str, ...] = (value,)
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        texts = tuple(value)
    elif isinstance(value, list) and value and all(_token_ids(v) for v in value):
        raise ChatBodyError(UNSUPPORTED_INPUT, param="input", code="unsupported_parameter")
    else:
        raise ChatBodyError("input must be a string or a list of strings", param="input")
    for index, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ChatBodyError(
                f"input[{index}] must be valid Unicode text (no lone surrogate)", param=f"input[{index}]"
            ) from None
    return texts


def _token_ids(value: Any) -> bool:
    """A token id, or a list of them (one text as tokens)."""
    if isinstance(value, list):
        return bool(value) and all(_token_ids(v) and not isinstance(v, list) for v in value)
    return isinstance(value, int) and not isinstance(value, bool)


def _param_of(problem: str) -> str:
    """The parameter an `inputs_problem` names: ``input[3]`` for one text, else ``input``."""
    head = problem.split(" ", 1)[0]
    return head if head.startswith("input[") else "input"
