"""The bounds of an embedding request and of its vectors (``limits.py``'s embedding table), in one
place: ingest refuses a body by them (400), the dispatcher refuses a record written straight to
Kafka by them (dead-letter topic), and checks the backend's vectors against them before they go into
a result.

A result's vectors are bounded in bytes (inputs x dimensions x 4, Avro floats) so the result fits a
reply topic's record: a request is refused when the vectors it asks for could not fit (counted with
`ASSUMED_EMBEDDING_DIMENSIONS` when it names no `dimensions`), and the backend's vectors are
refused when they do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from inferq.messaging import limits

# An Avro float.
FLOAT_BYTES = 4


def vector_bytes(inputs: int, dimensions: int) -> int:
    """The bytes of `inputs` vectors of `dimensions` floats, as a result record carries them."""
    return inputs * dimensions * FLOAT_BYTES


def inputs_problem(inputs: Sequence[str]) -> str | None:
    """What is wrong with an embedding request's texts (named as OpenAI's `input`), or None."""
    if not inputs:
        return "input must hold at least one text"
    if len(inputs) > limits.MAX_EMBEDDING_INPUTS:
        return f"input holds {len(inputs)} texts, at most {limits.MAX_EMBEDDING_INPUTS} are taken"
    for index, text in enumerate(inputs):
        if not text:
            return f"input[{index}] is empty"
        if len(text) > limits.MAX_EMBEDDING_INPUT_CHARS:
            return f"input[{index}] is over {limits.MAX_EMBEDDING_INPUT_CHARS} characters"
    return None


def dimensions_problem(dimensions: int | None) -> str | None:
    """What is wrong with a `dimensions` value (an integer, as the caller's body gave it), or None."""
    if dimensions is not None and not 1 <= dimensions <= limits.MAX_EMBEDDING_DIMENSIONS:
        return f"dimensions must be 1 to {limits.MAX_EMBEDDING_DIMENSIONS}"
    return None


def result_size_problem(inputs: int, dimensions: int | None) -> str | None:
    """Why the vectors asked for could not fit a result record (`MAX_EMBEDDING_RESULT_BYTES`), or None."""
    counted = dimensions or limits.ASSUMED_EMBEDDING_DIMENSIONS
    if vector_bytes(inputs, counted) <= limits.MAX_EMBEDDING_RESULT_BYTES:
        return None
    most = limits.MAX_EMBEDDING_RESULT_BYTES // (counted * FLOAT_BYTES)
    named = "" if dimensions else f" (counted with {counted}, the default dimensions)"
    return (
        f"{inputs} vectors of {counted} dimensions{named} are over the "
        f"{limits.MAX_EMBEDDING_RESULT_BYTES} bytes a result carries: send at most {most} texts"
        " per request, or fewer dimensions"
    )


def request_problem(inputs: Sequence[str], dimensions: int | None) -> str | None:
    """The first problem of an embedding request's texts and dimensions, or None."""
    return (
        inputs_problem(inputs)
        or dimensions_problem(dimensions)
        or result_size_problem(len(inputs), dimensions)
    )


def vectors_problem(vectors: object, *, inputs: int, dimensions: int | None) -> str | None:
    """What is wrong with the vectors a backend answered for `inputs` texts (untrusted): a list of
    `inputs` lists of finite numbers, all of one length, `dimensions` when asked, within the
    result's bytes. The problem names the field, never a value."""
    if not isinstance(vectors, list) or len(vectors) != inputs:
        return f"embeddings: not {inputs} vectors, one per input"
    width: int | None = None
    for vector in vectors:
        if not isinstance(vector, list) or not vector:
            return "embeddings: a vector is not a list of numbers"
        if width is None:
            width = len(vector)
        if len(vector) != width:
            return "embeddings: vectors of different lengths"
    if width is None or width > limits.MAX_EMBEDDING_DIMENSIONS:
        return f"embeddings: more than {limits.MAX_EMBEDDING_DIMENSIONS} dimensions"
    if dimensions is not None and width != dimensions:
        return "embeddings: not the dimensions asked for"
    if vector_bytes(inputs, width) > limits.MAX_EMBEDDING_RESULT_BYTES:
        return f"embeddings: over the {limits.MAX_EMBEDDING_RESULT_BYTES} bytes a result carries"
    for vector in vectors:
        for value in vector:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                return "embeddings: a value is not a finite number"
            if abs(value) > FLOAT32_MAX:
                return "embeddings: a value is outside a 32-bit float's range"
    return None


# The largest finite 32-bit float: a larger value would be written as infinity.
FLOAT32_MAX = 3.4028234663852886e38
